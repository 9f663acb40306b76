//! Builds cozyplane's container images offline, from the same Containerfiles a CI gives to
//! `docker build`, into OCI archives that `ctr images import`, `docker load` and
//! `podman load` take (docs/images.md).
//!
//! The flow, one module per step: [`plan`] says what each image holds, [`stage`] copies it
//! (with the shared libraries [`libs`] finds) into a build context, [`sbom`] records where
//! every file came from, [`containerfile`] reads the image's definition, [`assemble`] applies
//! it to the context ([`layer`] makes the layer tarballs), [`oci`] writes the archive, and
//! [`report`] says what was built. [`revision`] turns the git commit into the tag.

pub mod assemble;
pub mod containerfile;
pub mod digest;
pub mod layer;
pub mod libs;
pub mod oci;
pub mod plan;
pub mod report;
pub mod revision;
pub mod sbom;
pub mod stage;
