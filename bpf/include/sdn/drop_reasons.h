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
/* -20..-27: north-south SNAT (lib/snat.h, lib/egress.h) */
#define DROP_NO_GATEWAY		-20	/* VPC pod to outside the cluster, its VPC has no NAT gateway (for the family) */
#define DROP_SNAT_FULL		-21	/* no free NAT port for a new flow */
#define DROP_SNAT_NO_ROUTE	-22	/* a NATed packet has no route out of the uplink */
#define DROP_SNAT_NO_OWNER	-23	/* reply to a VPC NAT address whose port shard has no known node */
#define DROP_SNAT_NO_CT		-24	/* reply to a VPC NAT address without a NAT flow at its owner */
#define DROP_SNAT_UNSUPPORTED	-25	/* VPC traffic to outside the gateway cannot translate (protocol, ICMP error about no NATed flow) */
#define DROP_SNAT_TCP_NO_FLOW	-26	/* a TCP packet other than a SYN with no NAT flow: it never gets a port */
#define DROP_FIP_NO_TARGET	-28	/* Floating IP whose target is neither on this node nor known remotely */
#define DROP_NS_NO_ROUTE	-29	/* north-south egress: no route out of the node (bpf_fib_lookup) */
#define DROP_LB_REFUSED		-30	/* LoadBalancer traffic into a VPC whose gateway does not admit it */
#define DROP_LB_NO_BACKEND	-31	/* LoadBalancer frontend of a VPC with no ready backend */
#define DROP_DNS_NO_SOURCE	-34	/* VPC pod's DNS query to steer, but its fabric address is unknown (lib/dns.h) */
#define DROP_DNS_CT_FULL	-35	/* DNS steering: the query state could not be recorded */
#define DROP_DNS_NO_CT		-36	/* an answer from the node resolver's port with no steered query */
#define DROP_VIP_NO_BACKEND	-38	/* a new flow to a ServiceVIP port that has no backend (lib/lb.h) */
/* -45..-51: the policy layers (lib/policy.h, lib/pct.h) */
#define DROP_POL_NP		-45	/* NetworkPolicy: no rule admits the flow (the source's egress or the destination's ingress) */
#define DROP_POL_SG		-46	/* SecurityGroups: no rule admits the flow (either end's groups) */
#define DROP_POL_CT_INVALID	-47	/* a policed flow's packet without a live connection entry that cannot open one (TCP without a lone SYN, an ICMP error of no known flow) */
#define DROP_POL_REVOKED	-48	/* an established flow re-checked after a policy generation change and no longer admitted */
#define DROP_POL_HF_INGRESS	-49	/* HostFirewall: no rule admits the flow into this node (ingress armed) */
#define DROP_POL_HF_EGRESS	-50	/* HostFirewall: no rule admits the flow out of this node (egress armed) */
#define DROP_POL_SCRATCH	-51	/* a policy layer found no per-CPU scratch: dropped, never passed unjudged */
#define DROP_POL_ANP		-52	/* AdminNetworkPolicy: the first matching rule of the source's egress or the destination's ingress is Deny */
#define DROP_POL_BANP		-53	/* BaselineAdminNetworkPolicy: the first matching rule is Deny (no ANP decided, no NetworkPolicy isolates the pod) */
#define DROP_OVERLAY_FORGED_SRC	-54	/* an overlay packet from a known node whose inner source that node does not hold (another node's pod, this node's, a VPC address no node holds, the VNI of another net) */
#define DROP_OVERLAY_FORGED_TAG	-55	/* an overlay packet whose group tag is not its inner source's groups as this node knows them */
#define DROP_MIG_STANDBY	-56	/* to a live migration's target launcher before its VM announced itself there: the copy relayed to the source is the one delivered (lib/migrate.h) */
#define DROP_XLAT		-57	/* cross-family translation (NAT46/64, lib/xlat.h) refused a packet it cannot translate: IPv4 options, a fragment, UDP without a checksum, an ICMP error, another protocol */

/* Size of sdn_drops; leaves room for reasons to come without a map re-create. */
#define SDN_DROP_MAX		64
