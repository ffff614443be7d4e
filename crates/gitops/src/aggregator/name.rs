//! The aggregator's name: the `controller` label of its metrics and logs (the report task's and
//! the `AdditionalStatusReport` task's alike).

pub(super) const CONTROLLER: &str = "appset-report";
