//! The upstream Kubernetes end-to-end suite (`e2e.test` v1.36, `--provider=local`) on the
//! real-node lab (issue 40): the same two real nodes as `realnode.rs` (`realnode/kit.rs`,
//! [`kit::Cluster`]), the images the suite asks for built and imported
//! (`realnode/images.rs`), then `e2e.test` run from the lab's control namespace with the
//! admin's kubeconfig, and its JUnit report read back: pass / fail / skip per test.
//!
//! What runs:
//!
//! | mode | focus | how |
//! |---|---|---|
//! | default | [`MUST_PASS`] only | what `--features upstream-e2e` runs without more |
//! | `COZYPLANE_E2E_FULL=1` (`make e2e`) | [`FULL_FOCUS`]: every `[sig-network]` test and the `[sig-node]` conformance tests that reach pods over the network (probes, lifecycle hooks, PreStop) | hours: most Services tests wait out their timeouts |
//! | `COZYPLANE_E2E_FOCUS=<regex>` | that Go regex, as `--ginkgo.focus` | one upstream test by name, e.g. `COZYPLANE_E2E_FOCUS='intra-pod communication: http'` |
//!
//! Every mode passes [`SKIPS`] as `--ginkgo.skip`: each entry is a literal piece of a test's
//! name and the reason the lab cannot run it. The test fails when a [`MUST_PASS`] test that
//! was selected did not pass (and, without `COZYPLANE_E2E_FOCUS`, when one was not run at
//! all); every other failure is reported, not failed on: the agents are the lab's Service
//! proxy (`--kube-proxy-replacement`, no kube-proxy runs), and the Services tests that need
//! what it does not serve yet fail. Service names resolve through the kit's cluster DNS
//! (`realnode/dns.rs`).
//!
//! The report (JUnit XML, e2e.test's output, a summary) stays in
//! `$COZYPLANE_E2E_REPORT_DIR`, else `<target dir>/upstream-e2e/<unix time>/`.
//!
//! Built only with the cargo feature `upstream-e2e` (`[[test]]` with `required-features`
//! in `lab/Cargo.toml`; `make e2e` enables it), so `make test` does not run it. Needs
//! root and what `realnode.rs` needs, and `KUBE_BIN_DIR/e2e.test.xz`.

#[path = "realnode/host.rs"]
mod host;
#[path = "realnode/images.rs"]
mod images;
#[path = "realnode/kit.rs"]
mod kit;

use std::path::{Path, PathBuf};
use std::time::Instant;

use cozyplane_lab::Lab;

/// Tests that must pass (literal pieces of their names): pod-to-pod traffic on and across
/// the nodes, and node-to-pod, which need nothing but the CNI plugin and the datapath.
const MUST_PASS: &[&str] = &[
    "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http [NodeConformance] [Conformance]",
    "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: udp [NodeConformance] [Conformance]",
    "[sig-network] Networking Granular Checks: Pods should function for node-pod communication: http [LinuxOnly] [NodeConformance] [Conformance]",
    "[sig-network] Networking Granular Checks: Pods should function for node-pod communication: udp [LinuxOnly] [NodeConformance] [Conformance]",
];

/// The broad focus of `make e2e` (a Go regex).
const FULL_FOCUS: &str =
    r"\[sig-network\]|\[sig-node\].*(Probing container|Container Lifecycle Hook|PreStop).*\[Conformance\]";

/// What the lab cannot run: a literal piece of the test's name, and why.
const SKIPS: &[(&str, &str)] = &[
    (
        "[Feature:LoadBalancer]",
        "needs a cloud LoadBalancer: provider local has none",
    ),
    (
        "LoadBalancer service",
        "needs a cloud LoadBalancer: provider local has none",
    ),
    (
        "Type LoadBalancer",
        "needs a cloud LoadBalancer: provider local has none",
    ),
    (
        "[Feature:IPv6DualStack]",
        "the real-node lab is IPv4 only (node addresses, pod blocks, Service range)",
    ),
    (
        "[Feature:Networking-IPv6]",
        "IPv6: the real-node lab is IPv4 only",
    ),
    (
        "SCTP",
        "SCTP: cozyplane's datapath carries TCP, UDP and ICMP only",
    ),
    (
        "[Disruptive]",
        "restarts or breaks nodes and components: the suite has no SSH into lab nodes (provider local)",
    ),
    (
        "[Feature:Networking-IPv4]",
        "needs the Internet from pods: these machines have no outside network",
    ),
    (
        "[Feature:Networking-DNS]",
        "needs the Internet from pods: these machines have no outside network",
    ),
    (
        "[Feature:Networking-Performance]",
        "an iperf2 benchmark, not a check (docs/benchmarks.md has ours)",
    ),
    (
        "[Feature:PerformanceDNS]",
        "DNS at scale: the lab's cluster DNS is a stand-in (dnsmasq fed from the Services, realnode/dns.rs), nothing to measure",
    ),
    (
        "[sig-network] DNS",
        "CoreDNS' own records: the lab's cluster DNS (realnode/dns.rs) serves Service A, headless and ExternalName records, and these tests also ask for SRV records of named ports, with `dig`, which the lab's agnhost image lacks",
    ),
    ("[Feature:Ingress]", "needs an Ingress controller"),
    (
        "[Feature:KubeProxy",
        "kube-proxy's own features: no kube-proxy runs",
    ),
    (
        "[sig-network] KubeProxy",
        "kube-proxy's conntrack settings: no kube-proxy runs",
    ),
    (
        "should check kube-proxy urls",
        "kube-proxy's health and metrics ports: no kube-proxy runs",
    ),
    ("[Provider:GCE]", "GCE only"),
];

/// `COZYPLANE_E2E_FULL=1`.
fn full() -> bool {
    std::env::var("COZYPLANE_E2E_FULL").is_ok_and(|v| v == "1" || v == "true")
}

/// The focus regex and whether it was given by `COZYPLANE_E2E_FOCUS`.
fn focus() -> (String, bool) {
    if let Ok(f) = std::env::var("COZYPLANE_E2E_FOCUS")
        && !f.is_empty()
    {
        return (f, true);
    }
    if full() {
        return (FULL_FOCUS.into(), false);
    }
    let alts: Vec<String> = MUST_PASS.iter().map(|t| regex::escape(t)).collect();
    (alts.join("|"), false)
}

fn skip_regex() -> String {
    let alts: Vec<String> = SKIPS.iter().map(|(t, _)| regex::escape(t)).collect();
    alts.join("|")
}

/// One `<testcase>` of ginkgo's JUnit report.
#[derive(Debug)]
struct Case {
    /// `[It] [sig-…] … [labels]` as ginkgo writes it.
    name: String,
    /// `passed`, `failed`, `skipped`, `panicked`, `timedout`, `interrupted`, …
    status: String,
    /// The `message` of its `<failure>` or `<skipped>` element.
    message: String,
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(end) = rest.find(';') else { break };
        let ent = &rest[1..end];
        let c = match ent {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => ent
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| ent.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match c {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The value of attribute `name` in the tag text `tag`.
fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let from = tag.find(&key)? + key.len();
    let len = tag[from..].find('"')?;
    Some(unescape(&tag[from..from + len]))
}

/// Every `<testcase>` of a ginkgo JUnit report.
fn parse_junit(xml: &str) -> Vec<Case> {
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find("<testcase ") {
        rest = &rest[i..];
        let Some(tag_end) = rest.find('>') else { break };
        let tag = &rest[..tag_end];
        let body_end = if tag.ends_with('/') {
            tag_end
        } else {
            rest.find("</testcase>").unwrap_or(rest.len())
        };
        let body = &rest[tag_end..body_end];
        let message = ["<failure ", "<skipped ", "<error "]
            .iter()
            .find_map(|el| {
                let at = body.find(el)?;
                let t = &body[at..];
                attr(&t[..t.find('>')?], "message")
            })
            .unwrap_or_default();
        out.push(Case {
            name: attr(tag, "name").unwrap_or_default(),
            status: attr(tag, "status").unwrap_or_default(),
            message,
        });
        rest = &rest[body_end..];
    }
    out
}

/// The name as ginkgo matches focus and skip against it: without the node type and the
/// trailing label list.
fn spec_text(name: &str) -> &str {
    let name = name.strip_prefix("[It] ").unwrap_or(name);
    // ginkgo appends the labels as ` [sig-x, Label, …]`; the text itself starts with `[sig-x]`.
    match name.rfind(" [sig-") {
        Some(i) if name.ends_with(']') && !name[i + 2..name.len() - 1].contains(']') => &name[..i],
        _ => name,
    }
}

/// The report's cases sorted into what the summary prints.
#[derive(Default, Debug)]
struct Summary {
    passed: Vec<String>,
    /// (name, first line of the failure).
    failed: Vec<(String, String)>,
    /// In focus, skipped by [`SKIPS`]: (name, reason).
    skipped_by_us: Vec<(String, String)>,
    /// Skipped by the suite itself at run time (its own reason, e.g. too few nodes).
    skipped_by_suite: Vec<(String, String)>,
}

fn summarize(cases: &[Case], focus: &regex::Regex) -> Summary {
    let mut s = Summary::default();
    for c in cases {
        if !c.name.starts_with("[It] ") {
            // Suite nodes (BeforeSuite, ReportAfterSuite): a failure there is reported.
            if !matches!(c.status.as_str(), "passed" | "skipped") {
                s.failed.push((c.name.clone(), first_line(&c.message)));
            }
            continue;
        }
        let text = spec_text(&c.name);
        match c.status.as_str() {
            "passed" => s.passed.push(text.into()),
            "skipped" if c.message == "skipped" => {
                // Not run: skipped by our table, or not in the focus at all.
                if let Some((_, why)) = SKIPS.iter().find(|(t, _)| text.contains(t))
                    && focus.is_match(text)
                {
                    s.skipped_by_us.push((text.into(), (*why).into()));
                }
            }
            "skipped" => {
                let why = c.message.trim_start_matches("skipped - ").trim();
                s.skipped_by_suite.push((text.into(), first_line(why)));
            }
            "pending" => {}
            _ => s
                .failed
                .push((text.into(), format!("{}: {}", c.status, first_line(&c.message)))),
        }
    }
    s
}

fn first_line(s: &str) -> String {
    let line = s.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    line.chars().take(300).collect()
}

impl Summary {
    fn print(&self) -> String {
        let mut out = format!(
            "upstream e2e: {} passed, {} failed, {} skipped by the lab's table, {} skipped by the suite\n",
            self.passed.len(),
            self.failed.len(),
            self.skipped_by_us.len(),
            self.skipped_by_suite.len()
        );
        let mut section = |title: &str, lines: Vec<String>| {
            if !lines.is_empty() {
                out.push_str(&format!("-- {title} ({}):\n", lines.len()));
                for l in lines {
                    out.push_str(&format!("  {l}\n"));
                }
            }
        };
        section("passed", self.passed.clone());
        section(
            "FAILED",
            self.failed
                .iter()
                .map(|(n, m)| format!("{n}\n      {m}"))
                .collect(),
        );
        section(
            "skipped by the lab's table",
            self.skipped_by_us
                .iter()
                .map(|(n, m)| format!("{n}\n      ({m})"))
                .collect(),
        );
        section(
            "skipped by the suite",
            self.skipped_by_suite
                .iter()
                .map(|(n, m)| format!("{n}\n      ({m})"))
                .collect(),
        );
        out
    }
}

fn report_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("COZYPLANE_E2E_REPORT_DIR") {
        return d.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    target.join("upstream-e2e").join(now.to_string())
}

#[test]
fn upstream_e2e_on_the_real_node_lab() {
    let e2e = cozyplane_conformance::realkube::binary("e2e.test")
        .unwrap_or_else(|e| panic!("e2e.test from KUBE_BIN_DIR: {e}"));
    let (focus, focus_given) = focus();
    let skip = skip_regex();
    let focus_re = regex::Regex::new(&focus).expect("the focus is a regex");
    let dir = report_dir();
    std::fs::create_dir_all(&dir).expect("report dir");
    Lab::run(2, async |lab| {
        let t0 = Instant::now();
        let cluster = kit::Cluster::start(lab).await;
        let cp = &cluster.cp;
        eprintln!("real-node lab up in {:?}", t0.elapsed());
        let kubeconfig = dir.join("kubeconfig");
        std::fs::copy(&cp.admin, &kubeconfig).expect("kubeconfig");
        let junit = dir.join("junit.xml");
        let log = dir.join("e2e.log");
        let timeout = if full() && !focus_given { "8h" } else { "1h" };
        let out = std::fs::File::create(&log).expect("e2e.log");
        let mut cmd = tokio::process::Command::new(&e2e);
        cmd.current_dir(&dir)
            .args([
                "--provider=local".to_string(),
                format!("--kubeconfig={}", kubeconfig.display()),
                "--kubectl-path=/usr/bin/kubectl".into(),
                format!("--ginkgo.focus={focus}"),
                format!("--ginkgo.skip={skip}"),
                "--ginkgo.no-color".into(),
                "--ginkgo.v".into(),
                format!("--ginkgo.timeout={timeout}"),
                format!("--ginkgo.junit-report={}", junit.display()),
                format!("--report-dir={}", dir.display()),
                "--disable-log-dump".into(),
                "--allowed-not-ready-nodes=0".into(),
                "--minStartupPods=0".into(),
            ])
            .env("KUBECONFIG", &kubeconfig)
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().expect("e2e.log"))
            .stderr(out)
            .kill_on_drop(true);
        eprintln!(
            "e2e.test --ginkgo.focus='{focus}'\n  --ginkgo.skip='{skip}'\n  output: {} (tail -f it), report in {}",
            log.display(),
            dir.display()
        );
        let t1 = Instant::now();
        let status = cmd.status().await.expect("e2e.test runs");
        eprintln!("e2e.test exited with {status} after {:?}", t1.elapsed());
        let xml = std::fs::read_to_string(&junit).unwrap_or_else(|e| {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(60).collect();
            panic!(
                "no JUnit report {}: {e}\n{}\n{}",
                junit.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
                cluster.node_logs()
            )
        });
        let summary = summarize(&parse_junit(&xml), &focus_re);
        let text = summary.print();
        eprintln!("{text}");
        std::fs::write(dir.join("summary.txt"), &text).expect("summary.txt");

        // The must-pass tests: each one selected must have passed; without an explicit focus
        // each must have been selected.
        let mut broken = Vec::new();
        for t in MUST_PASS {
            let passed = summary.passed.iter().any(|p| p.contains(t));
            let failed = summary.failed.iter().find(|(n, _)| n.contains(t));
            if let Some((_, why)) = failed {
                broken.push(format!("{t}: {why}"));
            } else if !passed && !focus_given {
                broken.push(format!("{t}: did not run"));
            }
        }
        // A failed BeforeSuite leaves nothing meaningful; the suite's report-writing
        // ReportAfterSuite nodes are reported only.
        let suite: Vec<_> = summary
            .failed
            .iter()
            .filter(|(n, _)| n.contains("BeforeSuite]"))
            .collect();
        assert!(
            broken.is_empty() && suite.is_empty(),
            "must-pass upstream tests did not pass: {broken:#?}\nsuite failures: {suite:#?}\n(see {})",
            log.display()
        );
        eprintln!(
            "upstream e2e: every must-pass test passed; {:?} in all",
            t0.elapsed()
        );
    });
}
