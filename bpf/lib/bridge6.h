/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The IPv6 rewrites of the fabric bridge (lib/bridge.h keeps the flow state,
 * which is family-neutral: every address in it is 128 bits). Same rule as for
 * IPv4: the fabric IP becomes the VPC IP, the client becomes the gateway
 * (fe80::1, the address the pod routes everything through) with a gateway port;
 * the pod's reply is turned back. Both addresses of a bridged flow are of one
 * family here; a v4 fabric IP bridged to a v6 VPC IP is translated by
 * lib/xlat.h instead (lib/bridge.h picks).
 */
#pragma once

#include "common.h"
#include "nat.h"
#include "nat6.h"
#include "parse.h"

/* sdn_to_pod: client -> fabric becomes gateway:gw_port -> VPC IP. */
static __always_inline int sdn_bridge6_fwd(struct __sk_buff *skb,
					   const struct sdn_pkt *p,
					   const struct sdn_addr *vpc_ip,
					   __be16 client_port, __be16 gw_port)
{
	struct sdn_addr gw;

	sdn_gw6(&gw);
	if (sdn_nat6_addr(skb, p, 0, &p->dst, vpc_ip) ||
	    sdn_nat6_addr(skb, p, 1, &p->src, &gw) ||
	    sdn_nat4_port(skb, p, 1, client_port, gw_port))
		return DROP_REWRITE;
	return 0;
}

/* sdn_from_pod: VPC IP -> gateway:gw_port becomes fabric -> client:port. */
static __always_inline int sdn_bridge6_rev(struct __sk_buff *skb,
					   const struct sdn_pkt *p,
					   const struct sdn_ct_rev *rv,
					   __be16 gw_port)
{
	if (sdn_addr_is_v4(&rv->fabric) || sdn_addr_is_v4(&rv->client))
		return DROP_UNSUPPORTED;
	if (sdn_nat6_addr(skb, p, 1, &p->src, &rv->fabric) ||
	    sdn_nat6_addr(skb, p, 0, &p->dst, &rv->client) ||
	    sdn_nat4_port(skb, p, 0, gw_port, rv->client_port))
		return DROP_REWRITE;
	return 0;
}
