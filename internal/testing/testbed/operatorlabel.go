package testbed

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterctlLabel is the label cluster-api-operator's component
// processing puts on every object of a provider it installs (clusterctl
// repository/components.go addCommonLabels, which the operator's
// phase_fetch.go runs through repository.NewComponents). clusterctl's
// move finds the kinds to move by it on their CRDs.
const ClusterctlLabel = "clusterctl.cluster.x-k8s.io"

// LabelAsTheOperator labels a provider's CRD as the operator installs it.
// The test bed renders CRDs from the modules' config/, which lack the
// label; the operator's own CRDs (its chart's) never get it.
func LabelAsTheOperator(crd metav1.Object) {
	if strings.HasSuffix(crd.GetName(), ".operator.cluster.x-k8s.io") {
		return
	}
	l := crd.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[ClusterctlLabel] = ""
	crd.SetLabels(l)
}
