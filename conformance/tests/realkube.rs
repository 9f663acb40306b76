//! The tier on the real Kubernetes control plane (`conformance::realkube`): etcd,
//! kube-apiserver (RBAC, ResourceQuota, aggregation, front-proxy CA, audit log) and
//! kube-controller-manager (namespace, garbage collector, resourcequota, clusterrole
//! aggregation, endpointslice, serviceaccount), with cozyplane-apiserver installed behind it with
//! exactly the chart's RBAC. Everything is driven through kube-apiserver with `kubectl` and
//! kube-rs.
//!
//! One control plane serves every test of this binary (it takes several seconds to start); each
//! test works in namespaces of its own. A test that stops our server takes the gate exclusively,
//! the others share it; the soak does not take it (it only watches the audit log). The control
//! plane is stopped by PID when `main` ends, whatever the tests did.
//!
//! Without the binaries (`KUBE_BIN_DIR`) the tests are reported as ignored after a loud banner;
//! in CI (`CI=true`) or with `REQUIRE_KUBE=1` that is a failure.

#[path = "realkube/doors.rs"]
mod doors;
#[path = "realkube/lifecycle.rs"]
mod lifecycle;
#[path = "realkube/registration.rs"]
mod registration;
#[path = "realkube/tenancy.rs"]
mod tenancy;

use std::path::Path;
use std::sync::{Arc, RwLock};

use cozyplane_conformance::realkube::cozy::Cozyplane;
use cozyplane_conformance::realkube::{self, ControlPlane};
use libtest_mimic::{Arguments, Trial};
use serde_json::{Value, json};

/// The shared control plane, our server and the gate.
pub(crate) struct Env {
    /// cozyplane-apiserver behind the control plane (dropped, i.e. killed, first).
    pub(crate) cozy: tokio::sync::Mutex<Cozyplane>,
    /// The control plane.
    pub(crate) cp: ControlPlane,
    /// Shared by tests that need our server up; exclusive for those that stop it.
    pub(crate) gate: RwLock<()>,
    /// The runtime every test runs on.
    pub(crate) rt: tokio::runtime::Runtime,
}

type Test = fn(&Arc<Env>);

/// Every test: (name, body). The soak comes first so that it overlaps the others.
fn tests() -> Vec<(&'static str, Test)> {
    vec![
        (
            "soak_no_403_for_the_server_and_no_watch_shorter_than_its_timeout",
            registration::soak,
        ),
        (
            "apiservice_registered_by_the_server_and_availability_follows_kill_and_restart",
            registration::availability,
        ),
        (
            "discovery_v1_v2_and_openapi_v2_v3_merged_by_kube_apiserver",
            registration::discovery_and_openapi,
        ),
        (
            "tenant_bound_to_admin_gets_our_kinds_through_the_charts_aggregated_roles",
            tenancy::tenant_persona,
        ),
        (
            "vpcbinding_needs_export_and_vpcpeering_needs_peer_through_real_rbac",
            tenancy::virtual_verbs,
        ),
        (
            "trace_with_kubectl_create_raw_in_its_namespace_and_forbidden_in_another",
            tenancy::trace,
        ),
        (
            "resourcequota_count_vpcs_limits_creates_and_reports_usage",
            tenancy::quota,
        ),
        (
            "x_remote_user_sent_directly_without_the_front_proxy_cert_is_never_honoured",
            tenancy::front_proxy_spoofing,
        ),
        (
            "namespace_deletion_by_the_namespace_controller_empties_our_kinds",
            lifecycle::namespace_deletion,
        ),
        (
            "garbage_collector_foreground_background_orphan_between_our_kinds",
            lifecycle::garbage_collection,
        ),
        ("ports_of_a_deleted_node_are_collected", lifecycle::port_gc),
        (
            "port_groups_follow_pod_labels",
            lifecycle::security_group_membership,
        ),
        (
            "gateway_nat_service_address_from_the_ingress_the_test_writes",
            doors::gateway_nat_service,
        ),
    ]
}

fn main() {
    let mut args = Arguments::from_args();
    // Most of a test's time is waiting on controllers: more threads than cores keeps the soak and
    // the exclusive test from serializing everything behind them.
    if args.test_threads.is_none() {
        args.test_threads = Some(6);
    }
    let bins = match realkube::bins() {
        Ok(b) => b,
        Err(why) => {
            realkube::not_run(&why);
            let trials = tests()
                .into_iter()
                .map(|(name, _)| Trial::test(name, || Ok(())).with_ignored_flag(true))
                .collect();
            libtest_mimic::run(&args, trials).exit();
        }
    };
    let selected: Vec<(&str, Test)> = tests()
        .into_iter()
        .filter(|(name, _)| {
            !args.list
                && args.filter.as_ref().is_none_or(|f| {
                    if args.exact {
                        name == f
                    } else {
                        name.contains(f.as_str())
                    }
                })
        })
        .collect();
    // `--list` and a filter matching nothing need no control plane.
    let env = (!selected.is_empty()).then(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (cp, cozy) = rt.block_on(async {
            let cp = ControlPlane::start(&bins).await;
            let cozy = cp.install_cozyplane(&[]).await;
            (cp, cozy)
        });
        Arc::new(Env {
            cp,
            cozy: tokio::sync::Mutex::new(cozy),
            gate: RwLock::new(()),
            rt,
        })
    });
    let trials = tests()
        .into_iter()
        .map(|(name, f)| {
            let env = env.clone();
            Trial::test(name, move || {
                let env = env.expect("a control plane for a selected test");
                f(&env);
                Ok(())
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    // Stop every process by PID before exit() skips destructors: the trials (and with them every
    // other reference, even of a test that panicked) are gone, so this is the last one.
    drop(env);
    conclusion.exit();
}

// ---------------------------------------------------------------------------------------------
// Helpers shared by the test modules.

/// An object of ours.
pub(crate) fn obj(kind: &str, name: &str, spec: &Value) -> Value {
    json!({ "apiVersion": "sdn.cozystack.io/v1alpha1", "kind": kind, "metadata": { "name": name }, "spec": spec })
}

/// A VPC with one CIDR.
pub(crate) fn vpc(name: &str, cidr: &str) -> Value {
    obj("VPC", name, &json!({ "cidrs": [cidr] }))
}

impl Env {
    /// Runs `f` on the shared runtime with the gate shared.
    pub(crate) fn run<F: Future<Output = ()>>(&self, f: F) {
        let _shared = self
            .gate
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.rt.block_on(f);
    }

    /// `kubectl create -n ns -f -` of `v` as `kc`: kubectl's output.
    pub(crate) async fn create(&self, kc: &Path, ns: &str, v: &Value) -> std::process::Output {
        self.cp
            .kubectl_stdin(kc, &["create", "-n", ns], &v.to_string())
            .await
    }

    /// As [`create`](Self::create), asserting success.
    pub(crate) async fn create_ok(&self, kc: &Path, ns: &str, v: &Value) {
        let out = self.create(kc, ns, v).await;
        assert!(
            out.status.success(),
            "create {v} in {ns} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// As [`create`](Self::create), asserting failure; returns stderr.
    pub(crate) async fn create_fails(&self, kc: &Path, ns: &str, v: &Value) -> String {
        let out = self.create(kc, ns, v).await;
        assert!(
            !out.status.success(),
            "create {v} in {ns} unexpectedly succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// `kubectl get <args> -o json` as the admin, parsed.
    pub(crate) async fn get_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let out = self.cp.ok(&self.cp.admin, &all).await;
        serde_json::from_str(&out).expect("kubectl prints JSON")
    }

    /// Whether `kubectl get <args>` as the admin says NotFound.
    pub(crate) async fn gone(&self, args: &[&str]) -> bool {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        let out = self.cp.kubectl(&self.cp.admin, &all).await;
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound")
    }

    /// `kubectl auth can-i <args>` as `kc`: the answer.
    pub(crate) async fn can_i(&self, kc: &Path, args: &[&str]) -> String {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        let out = self.cp.kubectl(kc, &all).await;
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A tenant: user `tenant-<ns>` bound to the built-in `admin` ClusterRole in `ns`; returns
    /// its kubeconfig once RBAC lets it create VPCs there (the chart's roles aggregated).
    pub(crate) async fn tenant(&self, ns: &str) -> std::path::PathBuf {
        let user = format!("tenant-{ns}");
        let kc = self.cp.user_kubeconfig(&user, &[], ns);
        self.cp
            .ok(
                &self.cp.admin,
                &[
                    "create",
                    "rolebinding",
                    "tenant-admin",
                    "-n",
                    ns,
                    "--clusterrole=admin",
                    &format!("--user={user}"),
                ],
            )
            .await;
        self.cp
            .eventually("the tenant to be allowed to create vpcs", || async {
                self.can_i(&kc, &["create", "vpcs.sdn.cozystack.io", "-n", ns])
                    .await
                    == "yes"
            })
            .await;
        kc
    }
}
