//! kube-rs clients: typed Api list/create/watch, the watcher (both initial-list modes).

use cozyplane_apis::v1alpha1::{Port, PortSpec, VPC, VPCRef, VPCSpec};
use cozyplane_conformance::{Backend, TestServer};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;

fn vpc(name: &str) -> VPC {
    let mut v = VPC::new(
        name,
        VPCSpec {
            cidrs: vec!["10.0.0.0/24".into()],
            mtu: 0,
            dhcp: None,
            dns64: false,
        },
    );
    v.metadata.namespace = Some("default".into());
    v
}

#[tokio::test]
async fn watch_01_03_kube_rs_api_list_and_watch() {
    let s = TestServer::start(Backend::Embedded).await;
    let api: Api<VPC> = Api::namespaced(s.client().await, "default");
    api.create(&PostParams::default(), &vpc("a")).await.unwrap();
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let rv = list.metadata.resource_version.unwrap();
    let mut stream = api
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &vpc("b")).await.unwrap();
    api.delete("a", &Default::default()).await.unwrap();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("b")),
        e => panic!("unexpected {e:?}"),
    }
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("a")),
        e => panic!("unexpected {e:?}"),
    }
}

async fn watcher_sees_initial_state_then_changes(streaming: bool, backend: Backend) {
    let s = TestServer::start(backend).await;
    let client = s.client().await;
    let ports: Api<Port> = Api::all(client);
    let spec = PortSpec {
        vpc_ref: VPCRef {
            namespace: "default".into(),
            name: "a".into(),
        },
        ip: "10.0.0.5".into(),
        node: "n1".into(),
        node_ip: "192.168.0.1".into(),
        ..Default::default()
    };
    ports
        .create(&PostParams::default(), &Port::new("v100.10-0-0-5", spec.clone()))
        .await
        .unwrap();
    let cfg = if streaming {
        watcher::Config::default().streaming_lists()
    } else {
        watcher::Config::default()
    };
    let mut events = watcher(ports.clone(), cfg.fields("spec.node=n1")).boxed();
    let mut seen_init_done = false;
    let mut seen_apply = false;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut created_second = false;
    while tokio::time::Instant::now() < deadline {
        let ev = tokio::time::timeout(std::time::Duration::from_secs(10), events.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match ev {
            watcher::Event::InitDone => {
                seen_init_done = true;
                if !created_second {
                    created_second = true;
                    let mut other = spec.clone();
                    other.ip = "10.0.0.6".into();
                    ports
                        .create(&PostParams::default(), &Port::new("v100.10-0-0-6", other))
                        .await
                        .unwrap();
                }
            }
            watcher::Event::Apply(p) if p.metadata.name.as_deref() == Some("v100.10-0-0-6") => {
                seen_apply = true;
                break;
            }
            _ => {}
        }
    }
    assert!(seen_init_done && seen_apply);
}

#[tokio::test]
async fn watch_12_kube_rs_watcher_list_watch() {
    watcher_sees_initial_state_then_changes(false, Backend::Embedded).await;
}

#[tokio::test]
async fn watch_08_12_kube_rs_watcher_streaming_list() {
    watcher_sees_initial_state_then_changes(true, Backend::Embedded).await;
}

#[tokio::test]
async fn watch_08_kube_rs_watcher_streaming_list_on_etcd() {
    watcher_sees_initial_state_then_changes(true, Backend::Etcd).await;
}
