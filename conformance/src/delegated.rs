//! The deployment the control-loop tests run against: the kube stand-in, and our server behind
//! it in delegated mode whose kube identity is the chart's ServiceAccount, bound to the chart's
//! `cozyplane-apiserver` ClusterRole as the RBAC table renders it (issue 15): the loops must work
//! with exactly that. Shared by `tests/controllers_kube.rs`, `doors.rs` and `service_vip.rs`.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use crate::objects::wait_for;
use crate::standin::{Cozyplane, Options, StandIn, Token};

/// The chart's ServiceAccount, as the stand-in names its token's user.
pub const SA: &str = "system:serviceaccount:cozy-system:cozyplane-apiserver";
/// Its token in the stand-in's token file.
pub const SA_TOKEN: &str = "cozyplane-apiserver-token";

/// The stand-in, our server behind it, and an admin client of the stand-in.
pub struct Delegated {
    /// The kube stand-in.
    pub standin: StandIn,
    /// Our server.
    pub cozy: Cozyplane,
    /// `kubernetes-admin` on the stand-in (which proxies `sdn.cozystack.io` to our server).
    pub client: kube::Client,
}

impl Delegated {
    /// The stand-in as `opts` configure it, with the ServiceAccount's token; our server with
    /// `extra` flags, its identity bound to the chart's role minus the rules whose first
    /// resource is in `without`. Returns once `v1alpha1.sdn.cozystack.io` is Available.
    pub async fn start(mut opts: Options, without: &[&str], extra: &[&str]) -> Self {
        opts.tokens
            .push(Token::new(SA_TOKEN, SA, &["system:serviceaccounts"]));
        let standin = StandIn::start(opts).await;
        grant(&standin, without).await;
        let client = standin.admin_client().await;
        let cozy = standin
            .start_cozyplane_as(&standin.token_kubeconfig(SA_TOKEN), extra)
            .await;
        wait_for(
            &Api::<APIService>::all(client.clone()),
            "v1alpha1.sdn.cozystack.io",
            "Available",
            |o: Option<&APIService>| {
                o.and_then(|a| a.status.as_ref())
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Available" && c.status == "True"))
            },
        )
        .await;
        Self {
            standin,
            cozy,
            client,
        }
    }

    /// Creates the namespace `name`.
    pub async fn namespace(&self, name: &str) {
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.into());
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("namespace {name}: {e}"));
    }
}

/// Binds the ServiceAccount to the chart's `cozyplane-apiserver` ClusterRole (as rendered from
/// the RBAC table, with `apiService.managedBy: server`), minus the rules on `without`.
async fn grant(s: &StandIn, without: &[&str]) {
    let rules: Vec<Value> = cozyplane_apiserver::rbac::server_role_rules()
        .into_iter()
        .filter(|r| !without.iter().any(|w| r["resources"][0] == *w))
        .collect();
    s.create(
        "clusterroles",
        None,
        json!({ "metadata": { "name": "cozyplane-apiserver" }, "rules": rules }),
    )
    .await
    .expect("the chart's ClusterRole");
    s.create(
        "clusterrolebindings",
        None,
        json!({
            "metadata": { "name": "cozyplane-apiserver" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cozyplane-apiserver" },
            "subjects": [{ "kind": "ServiceAccount", "name": "cozyplane-apiserver", "namespace": "cozy-system" }],
        }),
    )
    .await
    .expect("the chart's ClusterRoleBinding");
}
