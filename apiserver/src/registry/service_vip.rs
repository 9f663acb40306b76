//! Registry policy of `ServiceVIP`: validation from `crate::validation` and its printer columns.

use cozyplane_apis::v1alpha1::ServiceVIP;

use super::strategy::{self, Column};
use super::validate::{
    default_service_vip, field::FieldErrors, validate_service_vip, validate_service_vip_status_update,
    validate_service_vip_update,
};

/// Create/update policy of `ServiceVIP`.
pub struct Strategy;

impl strategy::Strategy for Strategy {
    type Object = ServiceVIP;

    const COLUMNS: &'static [Column] = &[
        Column {
            name: "IP",
            kind: "string",
            pointer: "/spec/ip",
            priority: 0,
            description: "The virtual address.",
        },
        Column {
            name: "VPC",
            kind: "string",
            pointer: "/spec/vpcRef/name",
            priority: 0,
            description: "The VPC.",
        },
        Column {
            name: "Phase",
            kind: "string",
            pointer: "/status/phase",
            priority: 0,
            description: "Pending or Ready.",
        },
        Column {
            name: "Service",
            kind: "string",
            pointer: "/spec/serviceRef/name",
            priority: 1,
            description: "The backing Service.",
        },
    ];

    fn default(&self, obj: &mut ServiceVIP) {
        default_service_vip(obj);
    }

    fn validate(&self, obj: &ServiceVIP) -> FieldErrors {
        validate_service_vip(obj)
    }

    fn validate_update(&self, new: &ServiceVIP, old: &ServiceVIP) -> FieldErrors {
        validate_service_vip_update(new, old)
    }

    fn validate_status_update(&self, new: &ServiceVIP, old: &ServiceVIP) -> FieldErrors {
        validate_service_vip_status_update(new, old)
    }

    fn allocator(&self) -> Option<&dyn crate::alloc::Allocator<cozyplane_apis::v1alpha1::ServiceVIP>> {
        Some(&crate::alloc::kinds::ServiceVipAllocator)
    }
}
