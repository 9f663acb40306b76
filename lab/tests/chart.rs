//! The chart's CNI installation, without root: the chart rendered by Helm (`COZYPLANE_HELM`,
//! `make deps`), the init container's command and the ConfigMap `cozyplane-cni` taken from the
//! rendered objects, and the proof that the lab installs every node the same way (same
//! installer, same conflist, same arguments, the same files installed under the same names),
//! mapping only `/host`, the ConfigMap's mount and the image's plugin path. The lab installs
//! the conflist of the chart's mode that keeps kube-proxy (`agent.kubeProxyReplacement:
//! false`), which chains `portmap`; with the agent as the Service proxy (the default) the
//! chart's conflist chains nothing. What the installer installs is what a runtime looks for:
//! every plugin under its conflist `type` (ours and the chained `portmap`). `make e2e` then
//! installs every lab node with it and adds every pod through the installed conflist, with
//! the node's `opt/cni/bin` as the only `CNI_PATH`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cozyplane_chartkit::{Manifest, Render};
use cozyplane_lab::{
    CONFLIST, INSTALL_CNI, SYSTEM_CNI_DIR, chart_dir, find_plugin, install_cni_command, install_cni_from,
};
use serde_json::Value;

/// Where the agent image has our plugin (the init container's third word).
const IMAGE_PLUGIN: &str = "/usr/bin/cozyplane-cni";

fn chart_file(rel: &str) -> String {
    let p = chart_dir().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The regular files of `dir`, by name, sorted.
fn file_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Every file under `root`, relative path → bytes.
fn tree(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The conflist's plugin types, in order.
fn types(conflist: &str) -> Vec<String> {
    let list: Value = serde_json::from_str(conflist).expect("the conflist is JSON");
    list["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .map(|p| p["type"].as_str().expect("a type").to_string())
        .collect()
}

/// A stand-in for our plugin binary in a directory of its own (the lab's `bins`).
fn fake_bins() -> tempfile::TempDir {
    let bins = tempfile::tempdir().unwrap();
    std::fs::write(bins.path().join("cozyplane-cni"), b"#!/bin/sh\n# our plugin\n").unwrap();
    bins
}

/// Runs the chart's installer with `plugin dir` `plugins` on `conflist` into `root`; the
/// output, success or not.
fn install(conflist: &Path, root: &Path, plugins: &Path) -> std::process::Output {
    let bins = fake_bins();
    std::process::Command::new("/bin/sh")
        .arg(chart_dir().join(INSTALL_CNI))
        .arg(bins.path().join("cozyplane-cni"))
        .arg(conflist)
        .arg(root)
        .arg(plugins)
        .output()
        .unwrap()
}

#[test]
fn the_lab_installs_the_cni_exactly_as_the_rendered_init_container() {
    // The lab's nodes keep kube-proxy's way for hostPorts (portmap): the chart's mode that
    // keeps kube-proxy.
    let r = Render::new("cozy-system")
        .set("agent.kubeProxyReplacement", "false")
        .ok();
    let ds = r.object("DaemonSet", "cozyplane-agent");
    let init = r.container("DaemonSet", "cozyplane-agent", "install-cni");
    let command = Manifest::strings(init, "command");
    let volumes: BTreeMap<&str, &Value> = ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .map(|v| (v["name"].as_str().expect("a volume name"), v))
        .collect();

    // The init container's mounts: the ConfigMap somewhere, and host paths under /host at
    // their own path, so `/host` stands for the node's `/`.
    let mut configmap_mount = None;
    for m in init["volumeMounts"].as_array().expect("volumeMounts") {
        let path = m["mountPath"].as_str().expect("mountPath");
        let v = volumes[m["name"].as_str().expect("name")];
        if let Some(host) = v["hostPath"]["path"].as_str() {
            assert_eq!(path, format!("/host{host}"), "{m}");
        } else if v["configMap"]["name"] == "cozyplane-cni" {
            configmap_mount = Some(path.to_string());
        } else {
            panic!("an init container mount of neither the host nor the ConfigMap: {m}");
        }
    }
    let configmap_mount = configmap_mount.expect("the init container mounts the ConfigMap");

    // The ConfigMap holds the chart's files/ as they are: the lab installs from those.
    let data = &r.object("ConfigMap", "cozyplane-cni")["data"];
    let data: BTreeMap<String, String> =
        serde_json::from_value(data.clone()).expect("ConfigMap data of strings");
    let files: Vec<String> = file_names(&chart_dir().join("files"));
    assert_eq!(data.keys().cloned().collect::<Vec<_>>(), files);
    for (k, v) in &data {
        assert_eq!(v, &chart_file(&format!("files/{k}")), "ConfigMap key {k}");
    }
    assert_eq!(
        format!(
            "files/{}",
            Path::new(&command[1])
                .strip_prefix(&configmap_mount)
                .unwrap()
                .display()
        ),
        INSTALL_CNI
    );

    // The rendered command with the three mappings is the lab's, word for word.
    let bins = fake_bins();
    let root = tempfile::tempdir().unwrap();
    let mapped: Vec<PathBuf> = command
        .iter()
        .map(|w| {
            if let Ok(rest) = Path::new(w).strip_prefix(&configmap_mount) {
                chart_dir().join("files").join(rest)
            } else if w == "/host" {
                root.path().to_path_buf()
            } else if w == IMAGE_PLUGIN {
                bins.path().join("cozyplane-cni")
            } else {
                PathBuf::from(w)
            }
        })
        .collect();
    assert_eq!(
        mapped,
        install_cni_command(bins.path(), root.path()),
        "the init container runs {command:?}"
    );
    assert_eq!(
        command.last().map(String::as_str),
        Some(SYSTEM_CNI_DIR),
        "the plugin directory is the image's /usr/lib/cni, Debian's path on the lab host too"
    );

    // What it installs: every plugin of the conflist under its type, the conflist under the
    // ConfigMap's key.
    install_cni_from(bins.path(), root.path());
    let conflist = &data["10-cozyplane.conflist"];
    let mut want = types(conflist);
    assert_eq!(want, ["cozyplane", "portmap"], "the chart's conflist");
    want.sort();
    let bin = root.path().join("opt/cni/bin");
    assert_eq!(names(&bin), want);
    assert_eq!(
        names(&root.path().join("etc/cni/net.d")),
        ["10-cozyplane.conflist"]
    );
    let installed = tree(root.path());
    assert_eq!(
        installed[Path::new("opt/cni/bin/cozyplane")],
        std::fs::read(bins.path().join("cozyplane-cni")).unwrap()
    );
    let portmap = Path::new(SYSTEM_CNI_DIR).join("portmap");
    assert_eq!(
        installed[Path::new("opt/cni/bin/portmap")],
        std::fs::read(&portmap).unwrap_or_else(|e| panic!(
            "{}: {e} (Debian's containernetworking-plugins: run `make deps`)",
            portmap.display()
        ))
    );
    assert_eq!(
        installed[Path::new("etc/cni/net.d/10-cozyplane.conflist")],
        conflist.as_bytes()
    );
    // A runtime with only the node's opt/cni/bin as CNI_PATH finds every plugin.
    for t in types(conflist) {
        assert_eq!(find_plugin(std::slice::from_ref(&bin), &t), Ok(bin.join(&t)));
    }
    let list: Value = serde_json::from_str(conflist).unwrap();
    assert_eq!(
        list["plugins"][0]["agentSocket"].as_str(),
        Some(cozyplane_cni::spec::DEFAULT_AGENT_SOCKET),
        "the conflist names the socket the agent listens on by default"
    );

    // The image's shell is busybox: the same install under it gives the same files.
    if Path::new("/usr/bin/busybox").exists() {
        let again = tempfile::tempdir().unwrap();
        let cmd = install_cni_command(bins.path(), again.path());
        let out = std::process::Command::new("/usr/bin/busybox")
            .arg("sh")
            .args(&cmd[1..])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(tree(again.path()), installed, "busybox sh installs the same");
    } else {
        eprintln!("NOT RUN: the install under busybox sh (no /usr/bin/busybox)");
    }
}

// The agent as the Service proxy (the chart's default) serves hostPorts itself: the
// ConfigMap holds files/kube-proxy-replacement/'s conflist, under the same name on the node,
// chaining nothing, and the installer installs our plugin alone (from a plugin directory
// without portmap too).
#[test]
fn with_the_agent_as_the_service_proxy_the_conflist_chains_no_portmap() {
    let r = Render::new("cozy-system").ok();
    let data = &r.object("ConfigMap", "cozyplane-cni")["data"];
    let data: BTreeMap<String, String> =
        serde_json::from_value(data.clone()).expect("ConfigMap data of strings");
    assert_eq!(
        data.keys().cloned().collect::<Vec<_>>(),
        file_names(&chart_dir().join("files")),
        "the same keys as when kube-proxy is kept"
    );
    let own = "files/kube-proxy-replacement/10-cozyplane.conflist";
    assert_eq!(data["10-cozyplane.conflist"], chart_file(own));
    assert_eq!(data["install-cni.sh"], chart_file(INSTALL_CNI));
    assert_eq!(types(&data["10-cozyplane.conflist"]), ["cozyplane"]);
    let kept: Value = serde_json::from_str(&chart_file(CONFLIST)).unwrap();
    let mut without_portmap = kept.clone();
    without_portmap["plugins"]
        .as_array_mut()
        .unwrap()
        .retain(|p| p["type"] != "portmap");
    assert_eq!(
        serde_json::from_str::<Value>(&chart_file(own)).unwrap(),
        without_portmap,
        "the two conflists differ by portmap alone"
    );

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("plugins");
    std::fs::create_dir(&empty).unwrap();
    let root = dir.path().join("root");
    let out = install(&chart_dir().join(own), &root, &empty);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(names(&root.join("opt/cni/bin")), ["cozyplane"]);
    assert_eq!(names(&root.join("etc/cni/net.d")), ["10-cozyplane.conflist"]);
}

#[test]
fn every_plugin_is_named_after_its_conflist_type_and_a_missing_one_installs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::write(plugins.join("chained"), b"chained").unwrap();
    let conf = dir.path().join("10-x.conflist");
    std::fs::write(
        &conf,
        r#"{"cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "renamed"}, {"type": "chained"}, {"type": "chained"}]}"#,
    )
    .unwrap();
    let root = dir.path().join("root");
    let out = install(&conf, &root, &plugins);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(names(&root.join("opt/cni/bin")), ["chained", "renamed"]);
    assert_eq!(
        std::fs::read(root.join("opt/cni/bin/chained")).unwrap(),
        b"chained"
    );
    assert_eq!(names(&root.join("etc/cni/net.d")), ["10-x.conflist"]);

    // A chained plugin the directory lacks: a message naming it, and nothing written.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let root = dir.path().join("root2");
    let out = install(&chart_dir().join(CONFLIST), &root, &empty);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("chains \"portmap\"") && err.contains(&format!("no {}/portmap", empty.display())),
        "{err}"
    );
    assert!(!root.exists(), "a failed install wrote {:?}", tree(&root));
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

// The chart's conflists are files/ and nothing else: no template holds a CNI configuration of
// its own.
#[test]
fn no_template_holds_a_conflist_of_its_own() {
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
