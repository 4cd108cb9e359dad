# labctl's image: the one static binary (CGO_ENABLED=0), built with its
# provider (-tags provider), on a distroless base, run by the libvirt
# provider's Deployment as 'labctl provider libvirt'. goreleaser builds
# it (dockers_v2 in .goreleaser.yaml), once per platform, with the
# binary for that platform at $TARGETPLATFORM/labctl in the build context
# and BASE_IMAGE from embedded/versions.yaml.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG TARGETPLATFORM
COPY ${TARGETPLATFORM}/labctl /labctl
# distroless's nonroot user, by number: the Deployment's runAsNonRoot can
# only check a numeric user.
USER 65532:65532
ENTRYPOINT ["/labctl"]
