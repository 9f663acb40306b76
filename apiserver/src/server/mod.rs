//! HTTP serving: routes, discovery, OpenAPI, watch, Table output, TLS, health and metrics.

pub mod authn;
pub mod discovery;
pub mod health;
pub mod metrics;
pub mod openapi;
pub mod router;
pub mod table;
pub mod tls;
pub mod watch;
