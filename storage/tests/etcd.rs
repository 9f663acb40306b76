//! The storage suite against a real etcd (Debian's `etcd-server`, started here on free loopback
//! ports), plus what only the etcd backend must do: keep a watch through an etcd restart, and
//! talk to an etcd that requires TLS client certificates.

use std::sync::Arc;

use bytes::Bytes;
use cozyplane_storage::etcd::EtcdStore;
use cozyplane_storage::testing::{self, Ctx, EtcdServer, next_change, runtime};
use cozyplane_storage::{Storage, WatchOptions};
use libtest_mimic::{Arguments, Trial};

fn main() {
    let args = Arguments::from_args();
    let shared = EtcdServer::start();
    let url = shared.client_url.clone();
    let mut trials: Vec<Trial> = testing::cases()
        .into_iter()
        .map(|case| {
            let url = url.clone();
            Trial::test(format!("etcd::{}", case.name), move || {
                // Cases that compact get a server of their own: compaction is store-wide.
                let own = case.exclusive.then(EtcdServer::start);
                let config = match &own {
                    Some(s) => s.config(),
                    None => cozyplane_storage::etcd::Config::new([url]),
                };
                runtime().block_on(async {
                    let store = EtcdStore::connect(config).await.unwrap();
                    let prefix = format!("/suite/{}/", case.name);
                    (case.run)(Ctx {
                        store: Arc::new(store),
                        prefix,
                    })
                    .await;
                });
                drop(own);
                Ok(())
            })
        })
        .collect();
    trials.push(Trial::test(
        "etcd::watch_resumes_without_gaps_across_an_etcd_restart",
        || {
            runtime().block_on(watch_resumes_without_gaps_across_an_etcd_restart());
            Ok(())
        },
    ));
    trials.push(Trial::test("etcd::connects_with_tls_client_certificates", || {
        runtime().block_on(connects_with_tls_client_certificates());
        Ok(())
    }));
    trials.push(Trial::test(
        "etcd::authenticates_with_username_and_password",
        || {
            runtime().block_on(authenticates_with_username_and_password());
            Ok(())
        },
    ));
    let conclusion = libtest_mimic::run(&args, trials);
    drop(shared); // stop etcd by PID before exit() skips destructors
    conclusion.exit();
}

async fn watch_resumes_without_gaps_across_an_etcd_restart() {
    let mut server = EtcdServer::start();
    let store = EtcdStore::connect(server.config()).await.unwrap();
    let opts = WatchOptions {
        prefix: true,
        ..Default::default()
    };
    let mut w = store.watch("/restart/", opts).await.unwrap();
    let mut want = Vec::new();
    for i in 0..50 {
        want.push(
            store
                .create(&format!("/restart/a{i:03}"), Bytes::from_static(b"x"))
                .await
                .unwrap()
                .mod_revision,
        );
    }
    // Read part of it, then take etcd away under the running watch.
    let mut got = Vec::new();
    for _ in 0..20 {
        got.push(next_change(&mut w).await.revision());
    }
    server.restart();
    for i in 0..50 {
        // The client reconnects by itself; retry while etcd finishes starting.
        let key = format!("/restart/b{i:03}");
        let rev = loop {
            match store.create(&key, Bytes::from_static(b"x")).await {
                Ok(kv) => break kv.mod_revision,
                Err(cozyplane_storage::Error::AlreadyExists { .. }) => {
                    break store.get(&key).await.unwrap().mod_revision;
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        };
        want.push(rev);
    }
    while got.len() < want.len() {
        got.push(next_change(&mut w).await.revision());
    }
    assert_eq!(
        got, want,
        "the watch must deliver every write exactly once, in order, across the restart"
    );
}

async fn connects_with_tls_client_certificates() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(vec!["127.0.0.1".into(), "localhost".into()]);
    let (client_cert, client_key) = leaf(vec!["cozyplane-apiserver".into()]);
    let write = |name: &str, pem: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, pem).unwrap();
        p
    };
    let ca_file = write("ca.pem", &ca.pem());
    let args = vec![
        format!("--cert-file={}", write("server.pem", &server_cert).display()),
        format!("--key-file={}", write("server-key.pem", &server_key).display()),
        format!("--trusted-ca-file={}", ca_file.display()),
        "--client-cert-auth".to_string(),
    ];
    let server = EtcdServer::start_with(args, "https");
    let mut config = server.config();
    config.ca_file = Some(ca_file.clone());
    config.cert_file = Some(write("client.pem", &client_cert));
    config.key_file = Some(write("client-key.pem", &client_key));
    let store = EtcdStore::connect(config.clone()).await.unwrap();
    let kv = store.create("/tls/a", Bytes::from_static(b"x")).await.unwrap();
    assert_eq!(store.get("/tls/a").await.unwrap(), kv);
    // Without a client certificate etcd refuses us.
    config.cert_file = None;
    config.key_file = None;
    config.dial_timeout = std::time::Duration::from_secs(2);
    config.request_timeout = std::time::Duration::from_secs(2);
    let refused = match EtcdStore::connect(config).await {
        Err(_) => true,
        Ok(s) => s.get("/tls/a").await.is_err(),
    };
    assert!(refused, "etcd must refuse a client without a certificate");
}

async fn authenticates_with_username_and_password() {
    let server = EtcdServer::start();
    let mut admin = etcd_client::Client::connect([server.client_url.clone()], None)
        .await
        .unwrap();
    admin.user_add("root", "s3cret", None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.auth_enable().await.unwrap();
    let mut config = server.config();
    config.username = Some("root".into());
    config.password = Some("s3cret".into());
    let store = EtcdStore::connect(config.clone()).await.unwrap();
    let kv = store.create("/auth/a", Bytes::from_static(b"x")).await.unwrap();
    assert_eq!(store.get("/auth/a").await.unwrap(), kv);
    // Without credentials, or with a wrong password, etcd refuses.
    config.password = Some("wrong".into());
    assert!(
        EtcdStore::connect(config.clone()).await.is_err(),
        "a wrong password must be refused"
    );
    config.username = None;
    config.password = None;
    let anonymous = EtcdStore::connect(config).await.unwrap();
    assert!(
        anonymous.get("/auth/a").await.is_err(),
        "an anonymous read must be refused"
    );
}
