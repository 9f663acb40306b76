//! The VPC Service the guests resolve by name through the resolver their DHCP gave them, and
//! reach.

use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use cozyplane_lab::LabPod;

use super::out;
use crate::common::Cp;

/// The VPC Service the guests resolve by name and reach: its ServiceVIPs.
#[derive(Clone, Copy)]
pub(crate) struct Web {
    pub(crate) vip4: IpAddr,
    pub(crate) vip6: IpAddr,
}

/// The Service's full name; the guests ask for it and for its short name `web` (through the
/// search list their dhclient wrote).
pub(crate) const WEB: &str = "web.t1.svc.cozy.local";
/// The backend's port (the Service's is 80).
pub(crate) const WEB_PORT: u16 = 8080;
/// The backend pod (it answers its name).
pub(crate) const BACKEND: &str = "web0";

/// Service t1/web attached to VPC blue (TCP 80 → [`WEB_PORT`]) and a ServiceVIP of each
/// family with `backend`'s VPC addresses, as the server's ServiceVIP loop would write them
/// (the lab's API server has no kube connection, so it does not run); the server allocates
/// the addresses from blue's ranges.
pub(crate) async fn web(cp: &Cp, backend: (IpAddr, Ipv6Addr)) -> Web {
    use cozyplane_apis::v1alpha1::ServiceVIP;
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use serde_json::json;

    let s: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "t1",
                     "annotations": {"sdn.cozystack.io/vpc": "blue"}},
        "spec": {"clusterIP": "10.96.7.7", "ports": [
            {"name": "http", "port": 80, "protocol": "TCP", "targetPort": WEB_PORT}]}}))
    .unwrap();
    Api::<Service>::namespaced(cp.kube.clone(), "t1")
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    let api = Api::<ServiceVIP>::all(cp.sdn.clone());
    let mut vips = Vec::new();
    for (any, ip) in [("0.0.0.0", backend.0), ("::", IpAddr::V6(backend.1))] {
        let v: ServiceVIP = serde_json::from_value(json!({"apiVersion": "sdn.cozystack.io/v1alpha1",
            "kind": "ServiceVIP", "metadata": {"generateName": "sv"},
            "spec": {"vpcRef": {"namespace": "t1", "name": "blue"},
                     "serviceRef": {"namespace": "t1", "name": "web"}, "ip": any,
                     "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}))
        .unwrap();
        let made = api.create(&PostParams::default(), &v).await.unwrap();
        let status = json!({"status": {"phase": "Ready", "backends": [{"ip": ip.to_string(),
            "ports": [{"protocol": "TCP", "port": 80, "targetPort": WEB_PORT}]}]}});
        api.patch_status(
            made.metadata.name.as_deref().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .unwrap();
        vips.push(
            made.spec
                .ip
                .parse::<IpAddr>()
                .expect("the server allocated the VIP"),
        );
    }
    Web {
        vip4: vips[0],
        vip6: vips[1],
    }
}

/// TCP [`WEB_PORT`] inside `p`'s netns, both families (one socket on `::`, IPv4 mapped), each
/// connection answered with `p`'s name; stopped when dropped.
pub(crate) struct Serve {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Serve {
    pub(crate) fn start(p: &LabPod) -> Self {
        use std::io::Write as _;
        use std::sync::atomic::Ordering;
        let l = cozyplane_lab::run_in(&p.ns, || std::net::TcpListener::bind(("::", WEB_PORT)))
            .expect("bind the backend's port");
        l.set_nonblocking(true).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, name) = (stop.clone(), format!("{}\n", p.name));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut c, _)) => {
                        let _ = c.set_nonblocking(false);
                        let _ = c.write_all(name.as_bytes());
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => panic!("the backend's accept: {e}"),
                }
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Inside a guest: each name resolved by glibc (`getaddrinfo` of the family asked, so with
/// the resolv.conf the guest's dhclient wrote), then one TCP connection to port 80 of the
/// first address: `<name> <address> <first line of the answer>` per name, ERR for a step
/// that failed.
pub(crate) const BY_NAME: &str = r#"
import socket, sys
fam = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
for name in sys.argv[2:]:
    try:
        a = socket.getaddrinfo(name, 80, fam, socket.SOCK_STREAM)[0][4][0]
    except OSError:
        print(name, "ERR", "ERR", flush=True)
        continue
    try:
        c = socket.create_connection((a, 80), timeout=3)
        print(name, a, c.makefile().readline().strip() or "ERR", flush=True)
        c.close()
    except OSError:
        print(name, a, "ERR", flush=True)
"#;

/// Guest `g` resolves the VPC Service by name (full and short) and reaches it over
/// IPv`fam`: both names are the ServiceVIP `vip`, and the backend answers. Asked again for
/// at most 20 s (the agents' views of a new Service catch up).
pub(crate) fn reach_by_name(g: &LabPod, fam: u8, vip: IpAddr, at: &str) {
    let want: Vec<String> = [WEB, "web"]
        .iter()
        .map(|n| format!("{n} {vip} {BACKEND}"))
        .collect();
    let f = fam.to_string();
    let t = Instant::now();
    loop {
        let o = g.ns.exec(&["python3", "-c", BY_NAME, &f, WEB, "web"]);
        let got: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(String::from)
            .collect();
        if got == want {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{at}: {WEB} by name over IPv{fam}: {got:?}, want {want:?}\n{}",
            out(&o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
