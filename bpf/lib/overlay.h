/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Encapsulation towards another node through the collect-metadata tunnel
 * device (VXLAN or Geneve: the helpers are the same, the device decides).
 * The VNI is the net, so the receiver's sdn_from_overlay knows which net the
 * inner addresses belong to without any lookup by source.
 */
#pragma once

#include "common.h"
#include "parse.h"

/* CONFIG(tunnel_groups): how a VPC packet carries its source's groups
 * (lib/policy.h, docs/policy.md).
 */
#define SDN_TUNNEL_GROUPS_GBP	1
#define SDN_TUNNEL_GROUPS_GENEVE 2

/* Wire VNI of a net: the default network travels under its own VNI. */
static __always_inline __u32 sdn_net_to_vni(__u32 net)
{
	return net ? net : CONFIG(net0_vni);
}

static __always_inline __u32 sdn_vni_to_net(__u32 vni)
{
	return vni == CONFIG(net0_vni) ? 0 : vni;
}

/*
 * An explicit VXLAN-GBP option of 0 ("groups not carried"). A gbp device in
 * collect-metadata mode builds the header from the option when there is one,
 * and otherwise from metadata vxlan_xmit_one never initialises: a packet
 * encapsulated without an option would carry whatever policy id was on the
 * kernel's stack, which the receiver reads as the source's groups. A
 * subprogram, so that its 4 bytes sit in a leaf frame, not in the callers'.
 */
static __sdn_noinline int sdn_gbp_none(struct __sk_buff *skb)
{
	__u32 none = 0;

	return bpf_skb_set_tunnel_opt(skb, &none, sizeof(none));
}

/* Sets the tunnel key towards r (VNI of net), the VXLAN-GBP tag 0, and the
 * MACs the receiver's tunnel device expects; 0 or a DROP_* reason.
 */
static __always_inline int sdn_encap_key(struct __sk_buff *skb, __u32 net,
					 const struct sdn_remote *r)
{
	struct bpf_tunnel_key key = {};
	__u64 flags = 0;
	__u8 tmac[6], gmac[6];

	key.tunnel_id = sdn_net_to_vni(net);
	key.tunnel_ttl = SDN_TUNNEL_TTL;
	if (sdn_addr_is_v4(&r->node)) {
		/* bpf_tunnel_key wants the IPv4 remote in host byte order. */
		key.remote_ipv4 = bpf_ntohl(r->node.w[3]);
		/* No outer UDP checksum over IPv4; IPv6 requires one (a zero one
		 * is dropped by a receiver without udp6zerocsumrx).
		 */
		flags |= BPF_F_ZERO_CSUM_TX;
	} else {
		__builtin_memcpy(key.remote_ipv6, r->node.b, 16);
		flags |= BPF_F_TUNINFO_IPV6;
	}
	if (bpf_skb_set_tunnel_key(skb, &key, sizeof(key), flags) < 0)
		return DROP_ENCAP;
	if (CONFIG(tunnel_groups) == SDN_TUNNEL_GROUPS_GBP &&
	    sdn_gbp_none(skb) < 0)
		return DROP_ENCAP;

	/* The receiver's tunnel device must see the inner frame as PACKET_HOST
	 * when it hands net-0 traffic to its stack.
	 */
	sdn_tunnel_mac(tmac);
	sdn_gw_mac(gmac);
	if (sdn_set_macs(skb, tmac, gmac) < 0)
		return DROP_REWRITE;
	return 0;
}

/* Sets the tunnel key and redirects to the tunnel device; returns the tc
 * verdict, or a DROP_* reason (negative). With VXLAN-GBP the packet carries
 * the tag 0; a VPC pod's packet has its source's groups written over it
 * afterwards (sdn_sg_tag).
 */
static __always_inline int sdn_encap(struct __sk_buff *skb, __u32 net,
				     const struct sdn_remote *r)
{
	__u32 ifindex = CONFIG(tunnel_ifindex);
	int ret;

	if (!ifindex)
		return DROP_ENCAP;
	ret = sdn_encap_key(skb, net, r);
	if (ret)
		return ret;
	return bpf_redirect(ifindex, 0);
}

/* Reads the tunnel key of a decapsulated packet and its outer source as an
 * sdn_addr; < 0 without a key (a packet that came through no tunnel).
 */
static __always_inline int sdn_tunnel_src(struct __sk_buff *skb,
					  struct bpf_tunnel_key *key,
					  struct sdn_addr *src)
{
	/* The caller names the underlay family. Asking for IPv6 fails on an IPv4
	 * tunnel, but asking for IPv4 "succeeds" on an IPv6 one (with the first
	 * bytes of the v6 source as remote_ipv4), so IPv6 is asked first.
	 */
	if (!bpf_skb_get_tunnel_key(skb, key, sizeof(*key), BPF_F_TUNINFO_IPV6)) {
		__builtin_memcpy(src->b, key->remote_ipv6, 16);
		return 0;
	}
	if (bpf_skb_get_tunnel_key(skb, key, sizeof(*key), 0))
		return -1;
	/* remote_ipv4 is in host byte order. */
	sdn_addr_from_v4(src, bpf_htonl(key->remote_ipv4));
	return 0;
}
