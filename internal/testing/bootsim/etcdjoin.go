package bootsim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// etcdAdvertiseAnnotation is the etcd static pod's annotation naming its
// client URL (cmd/kubeadm/app/constants EtcdAdvertiseClientUrlsAnnotationKey),
// which kubeadm join reads to find the running members.
const etcdAdvertiseAnnotation = "kubeadm.kubernetes.io/etcd.advertise-client-urls"

// etcdJoin is kubeadm join --control-plane's etcd step
// (cmd/kubeadm/app/phases/etcd/local.go CreateStackedEtcdStaticPodManifestFile,
// k8s.io/kubernetes v1.35.4): it finds the members by the etcd Pods'
// advertise-client-urls annotation (util/etcd NewFromCluster), connects
// with the healthcheck-client certificate from the machine's own pki
// folder, adds the new member as a learner, and, once the new etcd runs,
// promotes it, retrying while the learner catches up.
func etcdJoin(cs kubernetes.Interface, pkiPath, node string) func(ctx context.Context, peerURL string) (string, func(context.Context) error, error) {
	return func(ctx context.Context, peerURL string) (string, func(context.Context) error, error) {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=etcd,tier=control-plane"})
		if err != nil {
			return "", nil, fmt.Errorf("listing the etcd Pods: %w", err)
		}
		var endpoints []string
		for _, p := range pods.Items {
			if u := p.Annotations[etcdAdvertiseAnnotation]; u != "" {
				endpoints = append(endpoints, u)
			}
		}
		if len(endpoints) == 0 {
			return "", nil, fmt.Errorf("no etcd Pod in kube-system carries %s", etcdAdvertiseAnnotation)
		}
		pair, err := tls.LoadX509KeyPair(filepath.Join(pkiPath, "etcd", "healthcheck-client.crt"), filepath.Join(pkiPath, "etcd", "healthcheck-client.key"))
		if err != nil {
			return "", nil, err
		}
		caPEM, err := os.ReadFile(filepath.Join(pkiPath, "etcd", "ca.crt"))
		if err != nil {
			return "", nil, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		// The client's own log would print each refused promotion (the
		// learner still catching up), which the retry below expects.
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			TLS: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}})
		if err != nil {
			return "", nil, fmt.Errorf("connecting to etcd at %v: %w", endpoints, err)
		}
		resp, err := cli.MemberAddAsLearner(ctx, []string{peerURL})
		if err != nil {
			_ = cli.Close()
			return "", nil, fmt.Errorf("etcd member add --learner %s at %v: %w", peerURL, endpoints, err)
		}
		var initial []string
		for _, m := range resp.Members {
			name := m.Name
			if m.ID == resp.Member.ID {
				name = node
			}
			for _, u := range m.PeerURLs {
				initial = append(initial, name+"="+u)
			}
		}
		promote := func(ctx context.Context) error {
			defer cli.Close()
			deadline := time.Now().Add(2 * time.Minute)
			for {
				_, err := cli.MemberPromote(ctx, resp.Member.ID)
				if err == nil {
					return nil
				}
				if time.Now().After(deadline) {
					return err
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(500 * time.Millisecond):
				}
			}
		}
		return strings.Join(initial, ","), promote, nil
	}
}
