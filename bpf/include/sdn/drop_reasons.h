/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Why a packet was dropped. Every TC_ACT_SHOT in bpf/progs goes through
 * sdn_drop() (bpf/lib/drop.h) with one of these, which bumps
 * sdn_drops[-reason].
 *
 * Values are part of the ABI: they index a pinned map that outlives agent
 * upgrades and become metric labels, so a value is NEVER renumbered or
 * reused. Retire a reason by leaving a comment in its slot.
 *
 * Consumers: bpf/src/drop.rs (`DropReason`, checked against this file by
 * bpf/tests/abi_layout.rs), the agent's drop metrics, docs/datapath.md.
 */
#pragma once

#define DROP_INVALID		-1	/* truncated or malformed header */
#define DROP_UNKNOWN_L3		-2	/* ethertype other than IPv4/IPv6/ARP from a VPC port */
#define DROP_NO_PORT		-3	/* ifindex has no sdn_ports record */
#define DROP_SPOOF_IP		-4	/* source IP is not an endpoint of this port */
#define DROP_SPOOF_MAC		-5	/* source MAC differs from the endpoint record */
#define DROP_VPC_ISOLATION	-6	/* destination is outside the source's net */
#define DROP_NO_ENDPOINT	-7	/* delivery target missing or on another port */
#define DROP_NO_TUNNEL_KEY	-8	/* from_overlay without collect_md metadata */
#define DROP_ARP		-9	/* ARP from a VPC port not asking for the gateway */
#define DROP_CT_FULL		-10	/* bridge: no free gateway port for the flow */
#define DROP_BRIDGE_NO_CT	-11	/* VPC pod to the gateway with no bridge flow */
#define DROP_FRAGMENT		-12	/* bridge: a later IP fragment whose first fragment was not seen */
#define DROP_UNSUPPORTED_L4	-13	/* bridge NAT of a protocol it does not translate */
#define DROP_REWRITE		-14	/* a header/checksum rewrite helper failed */
#define DROP_ENCAP		-15	/* tunnel key could not be set or no tunnel device */
#define DROP_UNSUPPORTED	-16	/* a path not implemented yet (see docs/datapath.md) */
#define DROP_XNET_DENIED	-17	/* destination in a peer net, but the peering is not allowed */
#define DROP_OVERLAY_SOURCE	-18	/* decapsulated packet from an outer source that is no known node */
#define DROP_SEVERED		-19	/* VPC traffic from or to a pod whose Port was revoked (lib/sever.h) */
#define DROP_LB_NO_BACKEND	-38	/* a new flow to a ServiceVIP port that has no backend (lib/lb.h) */

/* Size of sdn_drops; leaves room for reasons to come without a map re-create. */
#define SDN_DROP_MAX		64
