/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Live migration (issue 27): while a VM's Port is held by two launcher pods on
 * two nodes, the source (the Port's spec.node) and the prepared target,
 *
 *   sdn_migrations  (on those two nodes) host veth ifindex of the launcher's
 *                   endpoint -> the other launcher's node. Written by the
 *                   agent with SDN_EP_F_MIGRATING on the endpoint; delivery
 *                   to the endpoint relays a copy there (lib/migrate.h).
 *   sdn_mig_peers   (on every other node) {net, ip} of the Port -> the
 *                   target's node: overlay trust accepts the VM's packets from
 *                   it as from sdn_remotes' node (lib/overlay_trust.h).
 *
 * Both values are struct sdn_remote (sdn/maps.h). Rust mirror:
 * bpf/src/maps/migrations.rs, bpf/src/maps/mig_peers.rs.
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>

#define SDN_MIGRATIONS_MAX	4096

/* sdn_migrations value flags: the target launcher's endpoint, prepared and
 * relaying, whose VM has not announced itself there yet (its first ARP or
 * RARP on the veth clears it). Until then nothing is delivered into it: the
 * launcher may still hold the VM's address itself (KubeVirt moves it to the
 * guest during its set-up), and would answer in the VM's name.
 */
#define SDN_MIG_F_STANDBY	(1u << 0)
#define SDN_MIG_PEERS_MAX	16384

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_MIGRATIONS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct sdn_remote);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_migrations SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_MIG_PEERS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_ep_key);
	__type(value, struct sdn_remote);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_mig_peers SEC(".maps");
#endif /* __bpf__ */
