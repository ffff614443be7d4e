//! The install artefacts as a user meets them: every chart rendered by Helm's own engine with
//! default and non-default values, bad values rejected naming the value, `deploy/` equal to the
//! hub chart, the CRDs identical to `argocd-pull crds`, and the image recipe.

mod agent_chart;
mod controller_chart;
mod deploy;
mod dry_run;
mod helm;
mod image;
mod observability;
mod principal_chart;
