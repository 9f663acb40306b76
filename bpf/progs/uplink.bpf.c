// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The hook on the node's uplink (tc ingress), ahead of the host stack: the
 * doors into VPCs (Floating IPs, LoadBalancer frontends, lib/doors.h).
 * Everything else is the host's.
 */
#include "../lib/common.h"
#include "../lib/doors.h"
#include "../lib/drop.h"
#include "../lib/parse.h"

SEC("classifier")
int sdn_from_uplink(struct __sk_buff *skb)
{
	struct sdn_pkt p;
	int ret;

	/* What we cannot parse is not addressed to a door: the host decides. */
	if (sdn_parse(skb, &p) || !p.family)
		return TC_ACT_OK;
	ret = sdn_doors_from_uplink(skb, &p);
	if (ret < 0)
		return sdn_drop(skb, ret);
	return ret ? ret : TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
