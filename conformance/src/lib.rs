//! Conformance tests for cozyplane: the API server driven over HTTPS by the real `kubectl` and
//! by kube-rs, on the embedded store and on a real etcd.
//!
//! The suites arrive with the API server's first part (issue 3).
