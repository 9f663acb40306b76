//! Delegated authentication and authorization for the cozyplane API server.
//!
//! An aggregated API server trusts the kube-apiserver for identity and policy: client
//! certificates, front-proxy request headers, TokenReview and SubjectAccessReview. This crate
//! holds that machinery as tower layers; the server stacks them in front of its routes.
//!
//! It arrives with the API server's second part (issue 4).
