//! The chart's CNI installation, without root or Helm: the init container runs the chart's
//! installer on the chart's conflist, and what it installs is what a runtime looks for (the
//! plugin's file name is the conflist's `type`). `make e2e` then runs the same installer for
//! every lab node and adds every pod through the installed conflist.

use std::path::Path;

use cozyplane_lab::{CONFLIST, INSTALL_CNI, chart_dir, find_plugin};
use serde_json::Value;

fn chart_file(rel: &str) -> String {
    let p = chart_dir().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Runs the chart's installer as the init container does, into `root`.
fn install(conflist: &Path, root: &Path) {
    let bin = root.join("plugin-binary");
    std::fs::write(&bin, b"#!/bin/sh\n").unwrap();
    let out = std::process::Command::new("sh")
        .arg(chart_dir().join(INSTALL_CNI))
        .arg(&bin)
        .arg(conflist)
        .arg(root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn the_installer_names_the_plugin_after_the_conflists_type() {
    let list: Value = serde_json::from_str(&chart_file(CONFLIST)).expect("the conflist is JSON");
    let kind = list["plugins"][0]["type"]
        .as_str()
        .expect("a first plugin with a type");
    let root = tempfile::tempdir().unwrap();
    install(&chart_dir().join(CONFLIST), root.path());
    assert_eq!(names(&root.path().join("opt/cni/bin")), vec![kind.to_string()]);
    assert_eq!(
        list["plugins"][0]["agentSocket"].as_str(),
        Some(cozyplane_cni::spec::DEFAULT_AGENT_SOCKET),
        "the conflist names the socket the agent listens on by default"
    );
    let installed = root.path().join("etc/cni/net.d/10-cozyplane.conflist");
    assert_eq!(
        std::fs::read_to_string(installed).unwrap(),
        chart_file(CONFLIST),
        "the conflist is installed as the chart has it"
    );
    // What a runtime then does with the installed conflist: our plugin resolves by type.
    let bin = root.path().join("opt/cni/bin");
    assert_eq!(find_plugin(std::slice::from_ref(&bin), kind), Ok(bin.join(kind)));

    // The name follows the conflist, whatever it says.
    let other = tempfile::tempdir().unwrap();
    let conf = other.path().join("10-x.conflist");
    std::fs::write(
        &conf,
        r#"{"cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "renamed", "a": {"type": "no"}}]}"#,
    )
    .unwrap();
    install(&conf, other.path());
    assert_eq!(
        names(&other.path().join("opt/cni/bin")),
        vec!["renamed".to_string()]
    );
}

// The runtime's lookup, as the lab's kubelet does it: a plugin installed under another name
// than the conflist's type is not found (what every ADD on a chart-installed node hit when
// the init container installed `cozyplane-cni` for `"type": "cozyplane"`).
#[test]
fn a_plugin_installed_under_another_name_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cozyplane-cni"), b"").unwrap();
    let err = find_plugin(&[dir.path().to_path_buf()], "cozyplane").unwrap_err();
    assert!(
        err.contains("failed to find plugin \"cozyplane\" in path"),
        "{err}"
    );
}

// The chart's templates wire exactly these two files: the ConfigMap carries them by
// `.Files.Get`, the init container mounts it and runs the installer on the conflist, and no
// template holds a conflist of its own.
#[test]
fn the_chart_installs_from_its_files_and_holds_no_other_conflist() {
    let t = chart_file("templates/agent.yaml");
    for needle in [
        "10-cozyplane.conflist: |\n    {{- .Files.Get \"files/10-cozyplane.conflist\" | nindent 4 }}",
        "install-cni.sh: |\n    {{- .Files.Get \"files/install-cni.sh\" | nindent 4 }}",
        "- /bin/sh\n            - /etc/cozyplane/cni/install-cni.sh\n            - /usr/bin/cozyplane-cni\n            - /etc/cozyplane/cni/10-cozyplane.conflist\n            - /host\n",
        "{name: cni-install, mountPath: /etc/cozyplane/cni, readOnly: true}",
        "{name: cni-install, configMap: {name: cozyplane-cni}}",
        "{name: cni-bin, mountPath: /host/opt/cni/bin}",
        "{name: cni-conf, mountPath: /host/etc/cni/net.d}",
    ] {
        assert!(t.contains(needle), "templates/agent.yaml lacks:\n{needle}");
    }
    for entry in std::fs::read_dir(chart_dir().join("templates")).unwrap() {
        let p = entry.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            !text.contains("\"plugins\"") && !text.contains("\"type\""),
            "{} holds a CNI configuration of its own",
            p.display()
        );
    }
}
