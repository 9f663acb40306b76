// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The hook on the node's collect-metadata tunnel device. */
#include "../lib/common.h"
#include "../lib/crossnet.h"
#include "../lib/drop.h"
#include "../lib/egress.h"
#include "../lib/endpoint.h"
#include "../lib/hostfw.h"
#include "../lib/lb.h"
#include "../lib/overlay.h"
#include "../lib/overlay_trust.h"
#include "../lib/parse.h"
#include "../lib/policy.h"

/*
 * Attached at tc ingress (a TCX link) of the overlay device (VXLAN or Geneve in
 * external/collect_md mode): it sees decapsulated frames with the tunnel key
 * readable. The outer source must be a known node (sdn_nodes). The VNI names
 * the net of the inner source: net 0 goes to the host stack; a VPC pod of this
 * node that is the endpoint {net, dst}, or {peer net, dst} of an allowed
 * peering, gets the packet straight into its netns (sdn_deliver_local); any
 * other VPC packet is dropped, since inner VPC addresses mean nothing without
 * their net.
 * Returns TC_ACT_OK, TC_ACT_REDIRECT, or TC_ACT_SHOT via sdn_drop().
 */
SEC("classifier")
int sdn_from_overlay(struct __sk_buff *skb)
{
	struct bpf_tunnel_key key = {};
	struct sdn_endpoint *ep;
	struct sdn_addr outer;
	struct sdn_pkt p;
	__u32 net, to;
	__u64 tag;
	int ret;

	if (sdn_tunnel_src(skb, &key, &outer) < 0)
		return sdn_drop(skb, DROP_NO_TUNNEL_KEY);
	/* Only the other nodes (the agent writes their tunnel addresses) may
	 * inject into a net: a VNI is no credential.
	 */
	if (!bpf_map_lookup_elem(&sdn_nodes, &outer))
		return sdn_drop(skb, DROP_OVERLAY_SOURCE);
	net = sdn_vni_to_net(key.tunnel_id);
	ret = sdn_parse(skb, &p);
	/* Net 0 is the host stack's (what it cannot parse included): a reply of
	 * a flow kube-proxy NATed on this node must meet its conntrack entry
	 * before it reaches the pod. A reply of a flow this node balanced (a
	 * Service backend on that node, its client here) first gets the
	 * frontend back as its source.
	 */
	if (!net) {
		if (!ret && p.family) {
			/* The sender may claim only its own pods and itself
			 * (lib/overlay_trust.h); net 0 carries no groups.
			 */
			ret = sdn_overlay_trust(skb, &p, 0, &outer, 0);
			if (ret)
				return sdn_drop(skb, ret);
			ret = sdn_lb_reverse(skb, &p, 0);
			if (ret < 0)
				return sdn_drop(skb, ret);
			/* To the node's own addresses: its HostFirewall, as
			 * at the uplink (lib/hostfw.h).
			 */
			ret = sdn_hf_in(skb, &p);
			if (ret)
				return sdn_drop(skb, ret);
		}
		return sdn_to_host(skb);
	}
	if (ret)
		return sdn_drop(skb, ret);
	if (!p.family)
		return sdn_drop(skb, DROP_UNKNOWN_L3);
	/* The sender may claim only the sources it holds in this net, with
	 * their groups (lib/overlay_trust.h).
	 */
	tag = sdn_sg_tag_in(skb);
	ret = sdn_overlay_trust(skb, &p, net, &outer, tag);
	if (ret)
		return sdn_drop(skb, ret);
	/* A reply from a Service backend on that node to a client of this one. */
	ret = sdn_lb_reverse(skb, &p, net);
	if (ret < 0)
		return sdn_drop(skb, ret);

	to = net;
	ep = sdn_endpoint_lookup(net, &p.dst);
	if (!ep) {
		/* A reply to net's NAT address, sent on by the node it is
		 * attracted to (lib/egress.h).
		 */
		ret = sdn_snat_from_overlay(skb, &p, net);
		if (ret != SDN_SNAT_PASS)
			return ret < 0 ? sdn_drop(skb, ret) : ret;
		/* A peered net's pod: the sender decided too, but the peering
		 * may be gone here already.
		 */
		ret = sdn_xnet_resolve(skb, net, &p.dst, &to);
		if (ret)
			return sdn_drop(skb, ret == DROP_VPC_ISOLATION ?
						     DROP_NO_ENDPOINT : ret);
		ep = sdn_endpoint_lookup(to, &p.dst);
		if (!ep)
			return sdn_drop(skb, DROP_NO_ENDPOINT);
	}
	/* SecurityGroups, with the source's groups from the tunnel option
	 * when the sender put them there (lib/policy.h).
	 */
	ret = sdn_sg_police(skb, &p, net, to, tag);
	if (ret)
		return sdn_drop(skb, ret);
	ret = sdn_deliver_local(skb, to, ep);
	return ret < 0 ? sdn_drop(skb, ret) : ret;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
