//! The doors of VPCs on the real kube-apiserver: the VPCGateway loop's Services are admitted by
//! kube-apiserver's own Service validation, and the test plays the LoadBalancer implementation
//! by writing the Service's `status.loadBalancer.ingress`, as MetalLB or a cloud controller
//! would. This control plane serves IPv4 Services only (`--service-cluster-ip-range` is IPv4),
//! so a dual-stack VPC's IPv6 Service is refused and the gateway says so.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::{Env, obj};

async fn items(e: &Env, kind: &str, ns: &str, selector: &str) -> Vec<Value> {
    e.get_json(&[kind, "-n", ns, "-l", selector]).await["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

pub(crate) fn gateway_nat_service(env: &Arc<Env>) {
    let e = env.clone();
    env.run(async move {
        let cp = &e.cp;
        let ns = cp.namespace("doors").await;
        e.create_ok(
            &cp.admin,
            &ns,
            &obj("VPC", "v1", &json!({ "cidrs": ["10.1.0.0/24", "fd00:1::/64"] })),
        )
        .await;
        e.create_ok(
            &cp.admin,
            &ns,
            &obj(
                "VPCGateway",
                "gw",
                &json!({ "vpcRef": { "name": "v1" }, "nat": { "enabled": true } }),
            ),
        )
        .await;
        let sel = "sdn.cozystack.io/vpc-gateway=gw";
        cp.eventually("the gateway's IPv4 Service", || async {
            items(&e, "services", &ns, sel).await.len() == 1
        })
        .await;
        let svc = items(&e, "services", &ns, sel).await.remove(0);
        let name = svc["metadata"]["name"].as_str().expect("name").to_string();
        assert!(name.starts_with("gw-v4-"), "{svc}");
        assert_eq!(svc["spec"]["type"], "LoadBalancer");
        assert_eq!(svc["spec"]["allocateLoadBalancerNodePorts"], false);
        assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(
            svc["metadata"]["labels"]["service.kubernetes.io/service-proxy-name"],
            "cozyplane"
        );
        assert_eq!(svc["metadata"]["ownerReferences"][0]["kind"], "VPCGateway");
        // The IPv6 Service was refused by kube-apiserver: no address, and the reason shown.
        cp.eventually("NATReady to name the refused IPv6 Service", || async {
            let g = e
                .get_json(&["vpcgateway.sdn.cozystack.io", "gw", "-n", &ns])
                .await;
            g["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == "NATReady"
                        && c["status"] == "False"
                        && c["reason"] == "NATAddressPending"
                        && c["message"].as_str().is_some_and(|m| m.contains("IPv6"))
                })
        })
        .await;
        // The test is the LoadBalancer implementation.
        let status = json!({ "status": { "loadBalancer": { "ingress": [{ "ip": "198.51.100.7" }] } } });
        cp.ok(
            &cp.admin,
            &[
                "patch",
                "service",
                &name,
                "-n",
                &ns,
                "--subresource=status",
                "--type=merge",
                "-p",
                &status.to_string(),
            ],
        )
        .await;
        cp.eventually("natAddress from the Service's ingress", || async {
            let g = e
                .get_json(&["vpcgateway.sdn.cozystack.io", "gw", "-n", &ns])
                .await;
            g["status"]["natAddress"] == "198.51.100.7" && g["status"]["phase"] == "Ready"
        })
        .await;
        let g = e
            .get_json(&["vpcgateway.sdn.cozystack.io", "gw", "-n", &ns])
            .await;
        assert_eq!(g["status"]["natAddress6"].as_str().unwrap_or_default(), "", "{g}");
        cp.eventually("the slice's endpoint at the NAT address", || async {
            let s = e.get_json(&["endpointslices", &name, "-n", &ns]).await;
            s["endpoints"] == json!([{ "addresses": ["198.51.100.7"], "conditions": { "ready": true } }])
                && s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "cozyplane"
        })
        .await;
        cp.ok(
            &cp.admin,
            &["delete", "vpcgateway.sdn.cozystack.io", "gw", "-n", &ns],
        )
        .await;
        cp.eventually("the Service and slice to go with the gateway", || async {
            items(&e, "services", &ns, sel).await.is_empty()
                && items(&e, "endpointslices", &ns, sel).await.is_empty()
        })
        .await;
    });
}
