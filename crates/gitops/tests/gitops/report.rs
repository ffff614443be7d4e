//! The ApplicationSet report.
