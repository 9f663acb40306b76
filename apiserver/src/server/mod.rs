//! HTTP serving: routes, discovery, OpenAPI, watch, Table output, TLS, health and metrics, and
//! the APIService registration. Authentication and authorization are `cozyplane-authz` layers.

pub mod apiservice;
pub mod discovery;
pub mod edge;
pub mod health;
pub mod metrics;
pub mod openapi;
pub mod router;
pub mod serve;
pub mod tls;
