// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The hook on the node's collect-metadata tunnel device. */
#include "../lib/common.h"
#include "../lib/drop.h"
#include "../lib/endpoint.h"
#include "../lib/overlay.h"
#include "../lib/parse.h"

static __always_inline int get_tunnel_key(struct __sk_buff *skb,
					  struct bpf_tunnel_key *key)
{
	/* The helper insists the caller names the underlay family. */
	if (!bpf_skb_get_tunnel_key(skb, key, sizeof(*key), 0))
		return 0;
	return bpf_skb_get_tunnel_key(skb, key, sizeof(*key),
				      BPF_F_TUNINFO_IPV6);
}

/*
 * Attached at tc ingress (a TCX link) of the overlay device (VXLAN or Geneve in
 * external/collect_md mode): it sees decapsulated frames with the tunnel key
 * readable. The VNI names the net of the inner addresses: net 0 goes to the
 * host stack; a VPC pod of this node that is the endpoint {net, dst} gets the
 * packet straight into its netns (sdn_deliver_local); any other VPC packet is
 * dropped, since inner VPC addresses mean nothing without their net.
 * Returns TC_ACT_OK, TC_ACT_REDIRECT, or TC_ACT_SHOT via sdn_drop().
 */
SEC("classifier")
int sdn_from_overlay(struct __sk_buff *skb)
{
	struct bpf_tunnel_key key = {};
	struct sdn_endpoint *ep;
	struct sdn_pkt p;
	__u32 net;
	int ret;

	if (get_tunnel_key(skb, &key) < 0)
		return sdn_drop(skb, DROP_NO_TUNNEL_KEY);
	net = sdn_vni_to_net(key.tunnel_id);
	/* Net 0 is the host stack's: a reply of a flow kube-proxy NATed on this
	 * node must meet its conntrack entry before it reaches the pod.
	 */
	if (!net)
		return sdn_to_host(skb);

	ret = sdn_parse(skb, &p);
	if (ret)
		return sdn_drop(skb, ret);
	if (!p.family)
		return sdn_drop(skb, DROP_UNKNOWN_L3);

	ep = sdn_endpoint_lookup(net, &p.dst);
	if (!ep)
		return sdn_drop(skb, DROP_NO_ENDPOINT);
	ret = sdn_deliver_local(skb, net, ep);
	return ret < 0 ? sdn_drop(skb, ret) : ret;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
