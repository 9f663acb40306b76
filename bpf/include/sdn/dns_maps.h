/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The maps of DNS steering (lib/dns.h): a VPC pod's queries to the cluster DNS
 * (or any cluster-internal address outside its VPC) go to this node's
 * split-horizon resolver, from the pod's fabric address, and the answers come
 * back as if from the address the pod asked. Included once, from maps.h.
 *
 * Rust mirror: bpf/src/abi.rs (structs), bpf/src/maps/dns_*.rs (wrappers).
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>

/* sdn_dns_cfg: ARRAY[SDN_DNS_CFG_MAX], where steered queries go, one slot per
 * family (a query is re-addressed within its family: no NAT46). Written by the
 * agent when it runs the resolver; port 0 (the initial value) turns steering of
 * that family off.
 */
#define SDN_DNS_CFG_V4	0
#define SDN_DNS_CFG_V6	1
#define SDN_DNS_CFG_MAX	2

struct sdn_dns_cfg {
	struct sdn_addr node;	/* the resolver's address, of the slot's family
				 * (IPv4 in 64:ff9b:: form) */
	__be16 port;		/* the resolver's port; 0 = no steering */
	__u8 pad[2];
};
_Static_assert(sizeof(struct sdn_dns_cfg) == 20, "ABI: sdn_dns_cfg");

/* sdn_dns_pods: {net, VPC address} of a VPC pod of this node -> its fabric
 * address (status.podIP), the source its steered queries carry: the resolver
 * knows the querier by it. Written by the agent from this node's Pods and Ports.
 */
struct sdn_dns_pod {
	struct sdn_addr fabric;
};
_Static_assert(sizeof(struct sdn_dns_pod) == 16, "ABI: sdn_dns_pod");

/* sdn_dns_ct: a steered query, keyed as its answer arrives at the pod's veth
 * (destination fabric address and port, protocol) -> what the pod addressed,
 * which the answer's source becomes again. Written and read by the datapath;
 * an LRU, so forgotten queries cost nothing lasting.
 */
struct sdn_dns_ct_key {
	struct sdn_addr fabric;
	__be16 sport;		/* the pod's source port */
	__u8 proto;
	__u8 pad;
};
_Static_assert(sizeof(struct sdn_dns_ct_key) == 20, "ABI: sdn_dns_ct_key");

struct sdn_dns_ct {
	struct sdn_addr dst;	/* the address the pod asked */
	__be16 dport;		/* its port (53) */
	__u8 pad[2];
};
_Static_assert(sizeof(struct sdn_dns_ct) == 20, "ABI: sdn_dns_ct");

#define SDN_DNS_PODS_MAX	65536
#define SDN_DNS_CT_MAX		65536

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SDN_DNS_CFG_MAX);
	__type(key, __u32);
	__type(value, struct sdn_dns_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_dns_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_DNS_PODS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_ep_key);
	__type(value, struct sdn_dns_pod);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_dns_pods SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_DNS_CT_MAX);
	__type(key, struct sdn_dns_ct_key);
	__type(value, struct sdn_dns_ct);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_dns_ct SEC(".maps");
#endif /* __bpf__ */
