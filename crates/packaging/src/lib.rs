//! Tests only (`tests/packaging`): the Helm charts in `charts/` rendered by Helm's own engine
//! (`helm-template`), `deploy/` kept equal to the hub chart, the CRDs identical to what
//! `argocd-pull crds` prints, and the image recipe (`Containerfile`, `hack/image.sh`).
