// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The hook on the node's uplink device (the default route's, or --uplink-device). */
#include "../lib/common.h"
#include "../lib/doors.h"
#include "../lib/drop.h"
#include "../lib/egress.h"
#include "../lib/hostfw.h"
#include "../lib/lb_snat.h"
#include "../lib/parse.h"

/*
 * Attached at tc ingress (a TCX link) of the uplink, ahead of the host's
 * routing: a dispatcher over the north-south doors. Each door recognises what
 * is its own (a reply to a NATed flow, a Floating IP, a LoadBalancer
 * frontend) and delivers it, locally or over the overlay to the node that
 * owns it; what is left to the node's own addresses meets the HostFirewall
 * when one is armed (lib/hostfw.h); everything else passes untouched.
 * Returns TC_ACT_OK, TC_ACT_REDIRECT, or TC_ACT_SHOT via sdn_drop().
 */
SEC("classifier")
int sdn_from_uplink(struct __sk_buff *skb)
{
	struct sdn_pkt p;
	int ret;

	/* What we cannot parse is not addressed to a door: the host decides. */
	if (sdn_parse(skb, &p) || !p.family)
		return TC_ACT_OK;

	/* Replies of flows from outside NATed to another node's backend
	 * (lib/lb_snat.h), then of masqueraded and gateway-NATed flows.
	 */
	ret = sdn_lb_snat_reply(skb, &p);
	if (ret != SDN_SNAT_PASS)
		return ret < 0 ? sdn_drop(skb, ret) : ret;
	ret = sdn_snat_from_uplink(skb, &p);
	if (ret != SDN_SNAT_PASS)
		return ret < 0 ? sdn_drop(skb, ret) : ret;

	/* Floating IPs, then LoadBalancer frontends (lib/doors.h). */
	ret = sdn_doors_from_uplink(skb, &p);
	if (ret < 0)
		return sdn_drop(skb, ret);
	if (ret)
		return ret;

	/* Kubernetes Services from outside the cluster: a NodePort of this
	 * node, an external or LoadBalancer IP (lib/lb.h, the external net).
	 * DNATed to the flow's backend. One of this node is handed to the host
	 * (its reply is reverse-NATed at the backend's sdn_from_pod and leaves
	 * by the FIB); one of another node is NATed to this node and sent there
	 * (lib/lb_snat.h).
	 */
	ret = sdn_lb_from_uplink(skb, &p);
	if (ret > 0)
		ret = sdn_lb_snat_send(skb, &p);
	if (ret)
		return ret < 0 ? sdn_drop(skb, ret) : ret;

	/* What is left and addressed to the node itself: HostFirewall. */
	ret = sdn_hf_in(skb, &p);
	return ret ? sdn_drop(skb, ret) : TC_ACT_OK;
}

/*
 * Attached at tc egress (TCX links) of the uplink and of the tunnel device:
 * the node's own packets leaving, judged by the HostFirewall when egress (or
 * ingress, for the replies) is armed (lib/hostfw.h). Forwarded traffic (pods',
 * encapsulated or masqueraded) passes untouched.
 * Returns TC_ACT_OK, or TC_ACT_SHOT via sdn_drop().
 */
SEC("classifier")
int sdn_host_out(struct __sk_buff *skb)
{
	int ret = sdn_hf_out(skb);

	return ret ? sdn_drop(skb, ret) : TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
