// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The hook on the node's uplink device (the default route's, or --uplink-device). */
#include "../lib/common.h"
#include "../lib/doors.h"
#include "../lib/drop.h"
#include "../lib/egress.h"
#include "../lib/parse.h"

/*
 * Attached at tc ingress (a TCX link) of the uplink, ahead of the host's
 * routing: a dispatcher over the north-south doors. Each door recognises what
 * is its own (a reply to a NATed flow, a Floating IP, a LoadBalancer
 * frontend) and delivers it, locally or over the overlay to the node that
 * owns it; everything else, the node's own traffic and the overlay's
 * included, passes untouched.
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

	/* Replies of masqueraded and gateway-NATed flows. */
	ret = sdn_snat_from_uplink(skb, &p);
	if (ret != SDN_SNAT_PASS)
		return ret < 0 ? sdn_drop(skb, ret) : ret;

	/* Floating IPs, then LoadBalancer frontends (lib/doors.h). */
	ret = sdn_doors_from_uplink(skb, &p);
	if (ret < 0)
		return sdn_drop(skb, ret);
	return ret ? ret : TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
