//! What the API server's own ServiceAccount may do on the kube-apiserver: one table,
//! [`SERVER_ACCESS`], of every kube resource the server reads or writes and why.
//!
//! Code builds its `kube::Api`s through the table ([`Access::api_all`],
//! [`Access::api_namespaced`]), never with `Api::all`/`Api::namespaced` directly (the test
//! `apiserver/tests/rbac.rs` scans the sources for that), and each use names the verb it needs
//! ([`Access::uses`], checked in debug builds). The chart's `cozyplane-apiserver` ClusterRole
//! and its bindings (`charts/cozyplane/templates/apiserver-rbac.yaml`) are generated from the
//! same table by [`server_rbac_yaml`], so a loop cannot read something the role does not grant.

use std::fmt::Write as _;

/// Where a grant comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The chart's `cozyplane-apiserver` ClusterRole.
    ServerRole,
    /// A bootstrap ClusterRole of Kubernetes, bound cluster-wide by the chart.
    ClusterRole(&'static str),
    /// A bootstrap Role of Kubernetes in a namespace, bound there by the chart.
    Role {
        /// Its namespace.
        namespace: &'static str,
        /// Its name.
        name: &'static str,
    },
}

/// When the server needs a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Always (with a kube connection).
    Always,
    /// With `apiService.managedBy: server` (`--ensure-apiservice`).
    ManagesApiService,
}

/// One row of the table: a kube resource, the verbs the server uses on it and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Access {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Plural, with `/<subresource>` for a subresource.
    pub resource: &'static str,
    /// The verbs used.
    pub verbs: &'static [&'static str],
    /// `resourceNames` the grant is limited to (empty: all).
    pub names: &'static [&'static str],
    /// Who grants it.
    pub via: Via,
    /// When it is needed.
    pub when: When,
    /// Which code uses it, for the role's comments and the docs.
    pub why: &'static str,
}

/// Port GC: the Node watch and the live `GET` that confirms a node is gone.
pub const NODES: Access = Access {
    group: "",
    resource: "nodes",
    verbs: &["get", "list", "watch"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "Port GC: the Node watch and the live GET confirming a node is gone; pod traces: the nodes' addresses (a list per trace)",
};
/// SecurityGroup membership: the Pod watch (labels).
pub const PODS: Access = Access {
    group: "",
    resource: "pods",
    verbs: &["get", "list", "watch"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "SecurityGroup membership: the Pod watch (pod labels); Port claimants: the live GET confirming a Port's pod is gone; pod traces: the pods (a list per trace)",
};
/// The Services the server reads and owns: the LoadBalancer Services the VPCGateway and
/// FloatingIP loops own (a watch limited to `service.kubernetes.io/service-proxy-name=cozyplane`),
/// and the Services annotated for a VPC that get ServiceVIPs.
pub const SERVICES: Access = Access {
    group: "",
    resource: "services",
    verbs: &["get", "list", "watch", "create", "patch", "delete"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "VPCGateway and FloatingIP loops: the LoadBalancer Services they own (create, align, delete; the watch reads the assigned address); ServiceVIPs: the Service watch, and patch writes the sdn.cozystack.io/vpc-attachment annotation",
};
/// EndpointSlices: those the door loops own, and the backends of ServiceVIPs.
pub const ENDPOINTSLICES: Access = Access {
    group: "discovery.k8s.io",
    resource: "endpointslices",
    verbs: &["list", "watch", "create", "patch", "delete"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "VPCGateway and FloatingIP loops: the EndpointSlices of their Services; ServiceVIPs: the EndpointSlice watch (a Service's backends)",
};
/// ServiceVIPs: the Event on a Service that cannot be attached.
pub const EVENTS: Access = Access {
    group: "",
    resource: "events",
    verbs: &["create"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "ServiceVIPs: an Event on a Service annotated for a VPC its namespace has no VPCBinding for; live migration: an Event on a VMI whose target has no prepared Port",
};
/// Namespace lifecycle admission.
pub const NAMESPACES: Access = Access {
    group: "",
    resource: "namespaces",
    verbs: &["get", "list", "watch"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "namespace lifecycle admission: the Namespace watch and its live GET fallback; pod traces: the namespaces' labels (a list per trace)",
};
/// Pod traces: the NetworkPolicies they compile.
pub const NETWORKPOLICIES: Access = Access {
    group: "networking.k8s.io",
    resource: "networkpolicies",
    verbs: &["list"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "pod traces: the NetworkPolicies they compile (a list per trace)",
};
/// Pod traces: the AdminNetworkPolicies they compile (none while the CRD is absent).
pub const ADMINNETWORKPOLICIES: Access = Access {
    group: "policy.networking.k8s.io",
    resource: "adminnetworkpolicies",
    verbs: &["list"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "pod traces: the AdminNetworkPolicies they compile (a list per trace)",
};
/// Pod traces: the BaselineAdminNetworkPolicy they compile (none while the CRD is absent).
pub const BASELINEADMINNETWORKPOLICIES: Access = Access {
    group: "policy.networking.k8s.io",
    resource: "baselineadminnetworkpolicies",
    verbs: &["list"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "pod traces: the BaselineAdminNetworkPolicy they compile (a list per trace)",
};
/// Quota admission (list per namespace) and the usage reconciler (list, watch).
pub const RESOURCEQUOTAS: Access = Access {
    group: "",
    resource: "resourcequotas",
    verbs: &["list", "watch"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "ResourceQuota admission and the usage reconciler",
};
/// Charging quota and recounting usage (`PUT …/status`).
pub const RESOURCEQUOTAS_STATUS: Access = Access {
    group: "",
    resource: "resourcequotas/status",
    verbs: &["update"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "ResourceQuota admission and the usage reconciler write status.used",
};
/// `--ensure-apiservice` creates the APIService (create cannot be limited by name).
pub const APISERVICES_CREATE: Access = Access {
    group: "apiregistration.k8s.io",
    resource: "apiservices",
    verbs: &["create"],
    names: &[],
    via: Via::ServerRole,
    when: When::ManagesApiService,
    why: "--ensure-apiservice creates the APIService (create cannot be limited by name)",
};
/// `--ensure-apiservice` reads and patches our APIService.
pub const APISERVICES: Access = Access {
    group: "apiregistration.k8s.io",
    resource: "apiservices",
    verbs: &["get", "patch"],
    names: &["v1alpha1.sdn.cozystack.io"],
    via: Via::ServerRole,
    when: When::ManagesApiService,
    why: "--ensure-apiservice reads and patches its APIService",
};
/// Delegated authentication (`cozyplane-authz`).
pub const TOKENREVIEWS: Access = Access {
    group: "authentication.k8s.io",
    resource: "tokenreviews",
    verbs: &["create"],
    names: &[],
    via: Via::ClusterRole("system:auth-delegator"),
    when: When::Always,
    why: "delegated authentication of bearer tokens",
};
/// Delegated authorization (`cozyplane-authz`).
pub const SUBJECTACCESSREVIEWS: Access = Access {
    group: "authorization.k8s.io",
    resource: "subjectaccessreviews",
    verbs: &["create"],
    names: &[],
    via: Via::ClusterRole("system:auth-delegator"),
    when: When::Always,
    why: "delegated authorization",
};
/// The client and front-proxy CAs (`cozyplane-authz` reads and watches the ConfigMap).
pub const AUTHENTICATION_CONFIGMAP: Access = Access {
    group: "",
    resource: "configmaps",
    verbs: &["get", "list", "watch"],
    names: &["extension-apiserver-authentication"],
    via: Via::Role {
        namespace: "kube-system",
        name: "extension-apiserver-authentication-reader",
    },
    when: When::Always,
    why: "the client and front-proxy CAs of kube-system/extension-apiserver-authentication",
};

/// Every access of the server, in the order the chart lists them.
pub const SERVER_ACCESS: [&Access; 18] = [
    &NODES,
    &PODS,
    &SERVICES,
    &ENDPOINTSLICES,
    &EVENTS,
    &NAMESPACES,
    &NETWORKPOLICIES,
    &ADMINNETWORKPOLICIES,
    &BASELINEADMINNETWORKPOLICIES,
    &RESOURCEQUOTAS,
    &RESOURCEQUOTAS_STATUS,
    &APISERVICES_CREATE,
    &APISERVICES,
    &TOKENREVIEWS,
    &SUBJECTACCESSREVIEWS,
    &AUTHENTICATION_CONFIGMAP,
    &VIRTUALMACHINEINSTANCES,
    &VIRTUALMACHINES,
];

/// Persistent Ports (issue 27): a KubeVirt VM's Ports live while its VirtualMachineInstance
/// does. A cluster without KubeVirt answers 404, which is "no such VM".
pub const VIRTUALMACHINEINSTANCES: Access = Access {
    group: "kubevirt.io",
    resource: "virtualmachineinstances",
    verbs: &["get", "list", "watch"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "Port claimants: a persistent Port's VM instance, looked up before its Ports are released; live migration: the VMIs' migrationState moves their Ports to the target at cutover",
};
/// Persistent Ports: a stopped VM (a VirtualMachine without an instance) keeps its Ports.
pub const VIRTUALMACHINES: Access = Access {
    group: "kubevirt.io",
    resource: "virtualmachines",
    verbs: &["get"],
    names: &[],
    via: Via::ServerRole,
    when: When::Always,
    why: "Port claimants: a stopped VM keeps its persistent Ports while its VirtualMachine exists",
};

/// The ServiceAccount (and the ClusterRole) name.
pub const SERVER_ACCOUNT: &str = "cozyplane-apiserver";

impl Access {
    /// Whether the row grants `verb`.
    pub fn grants(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// Declares that the caller uses `verb` on this resource: panics in debug builds (tests)
    /// when the table does not grant it. Returns `self` for chaining.
    pub fn uses(&'static self, verb: &str) -> &'static Self {
        debug_assert!(
            self.grants(verb),
            "{verb} {} is not in the RBAC table (apiserver/src/rbac/server.rs)",
            self.resource
        );
        self
    }

    fn check<K: kube::Resource<DynamicType = ()>>(&self) {
        debug_assert!(
            K::group(&()) == self.group && self.resource.split('/').next() == Some(&*K::plural(&())),
            "a {} API built from the RBAC row of {}",
            K::plural(&()),
            self.resource
        );
    }

    /// A cluster-wide `Api` of this row's resource.
    pub fn api_all<K: kube::Resource<DynamicType = ()>>(&'static self, client: kube::Client) -> kube::Api<K> {
        self.check::<K>();
        kube::Api::all(client)
    }

    /// A namespaced `Api` of this row's resource for a kind without Rust types (`ar`: its
    /// group and plural must be the row's).
    pub fn api_dynamic(
        &'static self,
        client: kube::Client,
        ns: &str,
        ar: &kube::api::ApiResource,
    ) -> kube::Api<kube::api::DynamicObject> {
        self.check_dynamic(ar);
        kube::Api::namespaced_with(client, ns, ar)
    }

    /// [`Self::api_dynamic`] across all namespaces (a watch of every object of the row).
    pub fn api_dynamic_all(
        &'static self,
        client: kube::Client,
        ar: &kube::api::ApiResource,
    ) -> kube::Api<kube::api::DynamicObject> {
        self.check_dynamic(ar);
        kube::Api::all_with(client, ar)
    }

    fn check_dynamic(&self, ar: &kube::api::ApiResource) {
        debug_assert!(
            ar.group == self.group && self.resource.split('/').next() == Some(ar.plural.as_str()),
            "a {} API built from the RBAC row of {}",
            ar.plural,
            self.resource
        );
    }

    /// A namespaced `Api` of this row's resource.
    pub fn api_namespaced<K>(&'static self, client: kube::Client, ns: &str) -> kube::Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        self.check::<K>();
        kube::Api::namespaced(client, ns)
    }
}

fn list(items: &[&str]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|i| {
            if i.is_empty() {
                "\"\"".to_string()
            } else {
                (*i).to_string()
            }
        })
        .collect();
    format!("[{}]", quoted.join(", "))
}

fn binding(out: &mut String, kind: &str, name: &str, namespace: Option<&str>, role_kind: &str, role: &str) {
    out.push_str("---\napiVersion: rbac.authorization.k8s.io/v1\n");
    let _ = writeln!(out, "kind: {kind}\nmetadata:\n  name: {name}");
    if let Some(ns) = namespace {
        let _ = writeln!(out, "  namespace: {ns}");
    }
    out.push_str("  labels:\n    {{- include \"cozyplane.labels\" . | nindent 4 }}\n");
    let _ = writeln!(
        out,
        "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: {role_kind}\n  name: {role}"
    );
    let _ = writeln!(
        out,
        "subjects:\n  - kind: ServiceAccount\n    name: {SERVER_ACCOUNT}\n    namespace: {{{{ .Release.Namespace }}}}"
    );
}

fn rule(out: &mut String, a: &Access) {
    let _ = writeln!(out, "  # {}.", a.why);
    let _ = writeln!(out, "  - apiGroups: {}", list(&[a.group]));
    let _ = writeln!(out, "    resources: {}", list(&[a.resource]));
    if !a.names.is_empty() {
        let _ = writeln!(out, "    resourceNames: {}", list(a.names));
    }
    let _ = writeln!(out, "    verbs: {}", list(a.verbs));
}

/// The chart template of the server's RBAC: the bindings of the bootstrap roles the table
/// names, the `cozyplane-apiserver` ClusterRole with one rule per [`Via::ServerRole`] row, and
/// its binding.
pub fn server_rbac_yaml() -> String {
    let mut out = String::from(
        "# Generated from the table of kube access by cozyplane_apiserver::rbac::server_rbac_yaml; do not edit.\n\
         # Regenerate: COZYPLANE_UPDATE_RBAC=1 cargo test -p cozyplane-apiserver --test rbac\n",
    );
    let mut seen: Vec<Via> = Vec::new();
    for a in SERVER_ACCESS {
        if seen.contains(&a.via) {
            continue;
        }
        seen.push(a.via);
        match a.via {
            Via::ServerRole => {}
            Via::ClusterRole(role) => binding(
                &mut out,
                "ClusterRoleBinding",
                &format!("{SERVER_ACCOUNT}:{role}"),
                None,
                "ClusterRole",
                role,
            ),
            Via::Role { namespace, name } => binding(
                &mut out,
                "RoleBinding",
                &format!("{SERVER_ACCOUNT}:{name}"),
                Some(namespace),
                "Role",
                name,
            ),
        }
    }
    out.push_str("---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n");
    let _ = writeln!(out, "  name: {SERVER_ACCOUNT}");
    out.push_str("  labels:\n    {{- include \"cozyplane.labels\" . | nindent 4 }}\nrules:\n");
    for when in [When::Always, When::ManagesApiService] {
        let rows: Vec<&Access> = SERVER_ACCESS
            .iter()
            .copied()
            .filter(|a| a.via == Via::ServerRole && a.when == when)
            .collect();
        if when == When::ManagesApiService {
            out.push_str("  {{- if eq .Values.apiService.managedBy \"server\" }}\n");
        }
        for a in rows {
            rule(&mut out, a);
        }
        if when == When::ManagesApiService {
            out.push_str("  {{- end }}\n");
        }
    }
    binding(
        &mut out,
        "ClusterRoleBinding",
        SERVER_ACCOUNT,
        None,
        "ClusterRole",
        SERVER_ACCOUNT,
    );
    out
}

/// The `cozyplane-apiserver` ClusterRole's rules as JSON (every [`Via::ServerRole`] row, as
/// with `apiService.managedBy: server`): for tests that bind a token to it.
pub fn server_role_rules() -> Vec<serde_json::Value> {
    SERVER_ACCESS
        .iter()
        .filter(|a| a.via == Via::ServerRole)
        .map(|a| {
            let mut r = serde_json::json!({
                "apiGroups": [a.group], "resources": [a.resource], "verbs": a.verbs,
            });
            if !a.names.is_empty() {
                r["resourceNames"] = serde_json::json!(a.names);
            }
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_granted_by_the_generated_role() {
        let y = server_rbac_yaml();
        for a in SERVER_ACCESS {
            match a.via {
                Via::ServerRole => {
                    let mut want = format!(
                        "  - apiGroups: {}\n    resources: {}\n",
                        list(&[a.group]),
                        list(&[a.resource])
                    );
                    if !a.names.is_empty() {
                        let _ = writeln!(want, "    resourceNames: {}", list(a.names));
                    }
                    let _ = writeln!(want, "    verbs: {}", list(a.verbs));
                    assert!(y.contains(&want), "{} is not granted:\n{y}", a.resource);
                }
                Via::ClusterRole(r) => assert!(y.contains(&format!("kind: ClusterRole\n  name: {r}\n"))),
                Via::Role { name, .. } => assert!(y.contains(&format!("kind: Role\n  name: {name}\n"))),
            }
        }
        assert!(y.contains("{{- if eq .Values.apiService.managedBy \"server\" }}\n  # --ensure-apiservice"));
    }

    #[test]
    fn the_informers_rows_grant_list_and_watch() {
        for a in [
            &NODES,
            &PODS,
            &SERVICES,
            &ENDPOINTSLICES,
            &NAMESPACES,
            &RESOURCEQUOTAS,
            &AUTHENTICATION_CONFIGMAP,
        ] {
            assert!(a.grants("list") && a.grants("watch"), "{}", a.resource);
        }
    }

    #[test]
    #[should_panic(expected = "is not in the RBAC table")]
    fn an_undeclared_verb_panics_in_tests() {
        PODS.uses("delete");
    }

    #[test]
    #[should_panic(expected = "built from the RBAC row")]
    fn an_api_of_another_resource_panics_in_tests() {
        // No request is made: building the Api is enough to fail.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let cfg = kube::Config::new("https://127.0.0.1:1".parse().expect("url"));
            let client = kube::Client::try_from(cfg).expect("client");
            let _: kube::Api<k8s_openapi::api::core::v1::Pod> = NODES.api_all(client);
        });
    }
}
