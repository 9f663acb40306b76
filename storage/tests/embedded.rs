//! The storage suite against the embedded backend, plus what only it must do: survive
//! `kill -9` without losing an acknowledged write, reopen where it left off, and keep its event
//! history bounded.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cozyplane_storage::embedded::{Config, EmbeddedStore};
use cozyplane_storage::testing::{self, Ctx, next, runtime};
use cozyplane_storage::{Error, ListOptions, Storage, WatchOptions};
use libtest_mimic::{Arguments, Trial};
use rand::Rng;

const CHILD_ENV: &str = "COZYPLANE_CRASH_CHILD_DIR";

fn main() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        return crash_child(&dir);
    }
    let args = Arguments::from_args();
    let mut trials: Vec<Trial> = testing::cases()
        .into_iter()
        .map(|case| {
            Trial::test(format!("embedded::{}", case.name), move || {
                runtime().block_on(async {
                    let dir = tempfile::tempdir().unwrap();
                    let store = EmbeddedStore::open(Config::new(dir.path())).await.unwrap();
                    (case.run)(Ctx {
                        store: Arc::new(store),
                        prefix: "/suite/".into(),
                    })
                    .await;
                });
                Ok(())
            })
        })
        .collect();
    trials.push(Trial::test(
        "embedded::acknowledged_writes_survive_sigkill",
        || {
            acknowledged_writes_survive_sigkill();
            Ok(())
        },
    ));
    trials.push(Trial::test("embedded::reopen_keeps_data_and_revision", || {
        runtime().block_on(reopen_keeps_data_and_revision());
        Ok(())
    }));
    trials.push(Trial::test("embedded::bounded_history_compacts_itself", || {
        runtime().block_on(bounded_history_compacts_itself());
        Ok(())
    }));
    libtest_mimic::run(&args, trials).exit();
}

/// The child side of the crash test: write forever from 16 tasks, print each acknowledged key.
fn crash_child(dir: &str) {
    runtime().block_on(async {
        let store = Arc::new(EmbeddedStore::open(Config::new(dir)).await.unwrap());
        let round: u64 = std::env::var("COZYPLANE_CRASH_ROUND").unwrap().parse().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        for w in 0..16u64 {
            let (store, tx) = (store.clone(), tx.clone());
            tokio::spawn(async move {
                for i in 0u64.. {
                    let key = format!("/crash/r{round}/w{w}/{i}");
                    let kv = store
                        .create(&key, Bytes::from(format!("value-{round}-{w}-{i}")))
                        .await
                        .unwrap();
                    tx.send(format!("{key} {}", kv.mod_revision)).unwrap();
                }
            });
        }
        let mut out = std::io::stdout().lock();
        while let Some(line) = rx.recv().await {
            writeln!(out, "{line}").unwrap();
            out.flush().unwrap();
        }
    });
}

fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    let mut acked: Vec<(String, u64, u64)> = Vec::new();
    for round in 0..6u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD_ENV, dir.path())
            .env("COZYPLANE_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        // Kill after a random number of acknowledgements, while writers are mid-flight.
        let kill_after = rng.random_range(50..3000);
        let mut lines = stdout.lines();
        for _ in 0..kill_after {
            let line = lines.next().expect("child ended early").unwrap();
            let (key, rev) = line.split_once(' ').unwrap();
            acked.push((key.to_string(), rev.parse().unwrap(), round));
        }
        Command::new("kill")
            .arg("-KILL")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        child.wait().unwrap();
        // Lines already written before the kill were acknowledged too.
        for line in lines.map_while(Result::ok) {
            let (key, rev) = line.split_once(' ').unwrap();
            acked.push((key.to_string(), rev.parse().unwrap(), round));
        }
        runtime().block_on(async {
            let store = EmbeddedStore::open(Config::new(dir.path())).await.unwrap();
            let max_rev = acked.iter().map(|a| a.1).max().unwrap();
            assert!(
                store.current_revision().await.unwrap() >= max_rev,
                "revision went backwards"
            );
            for (key, rev, _) in &acked {
                let kv = store
                    .get(key)
                    .await
                    .unwrap_or_else(|e| panic!("acknowledged {key} lost: {e}"));
                assert_eq!(kv.mod_revision, *rev, "{key}");
            }
        });
    }
}

async fn reopen_keeps_data_and_revision() {
    let dir = tempfile::tempdir().unwrap();
    let (kv, rev) = {
        let store = EmbeddedStore::open(Config::new(dir.path())).await.unwrap();
        let kv = store.create("/r/a", Bytes::from_static(b"x")).await.unwrap();
        store.create("/r/b", Bytes::from_static(b"y")).await.unwrap();
        (kv, store.current_revision().await.unwrap())
    };
    let store = EmbeddedStore::open(Config::new(dir.path())).await.unwrap();
    assert_eq!(store.current_revision().await.unwrap(), rev);
    assert_eq!(store.get("/r/a").await.unwrap(), kv);
    // History survives too: a watch from before the restart replays.
    let mut w = store
        .watch(
            "/r/",
            WatchOptions {
                revision: Some(kv.mod_revision),
                prefix: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(testing::next_change(&mut w).await.key(), Some("/r/b"));
    let next_write = store.create("/r/c", Bytes::from_static(b"z")).await.unwrap();
    assert_eq!(next_write.mod_revision, rev + 1);
}

async fn bounded_history_compacts_itself() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(Config {
        history: 100,
        ..Config::new(dir.path())
    })
    .await
    .unwrap();
    let first = store
        .create("/h/0", Bytes::from_static(b"x"))
        .await
        .unwrap()
        .mod_revision;
    for i in 1..1000 {
        store
            .create(&format!("/h/{i}"), Bytes::from_static(b"x"))
            .await
            .unwrap();
    }
    let mut w = store
        .watch(
            "/h/",
            WatchOptions {
                revision: Some(first),
                prefix: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(matches!(next(&mut w).await, Some(Err(Error::Gone { .. }))));
    let err = store
        .list(
            "/h/",
            &ListOptions {
                revision: Some(first),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Gone { .. }), "{err:?}");
    // Recent history is still there.
    let now = store.current_revision().await.unwrap();
    let l = store
        .list(
            "/h/",
            &ListOptions {
                revision: Some(now - 50),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(l.items.len(), 950);
    tokio::time::sleep(Duration::from_millis(1)).await;
}
