/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The one question asked of sdn_internal (include/sdn/internal_maps.h, which
 * lists who asks it and why).
 */
#pragma once

#include "common.h"

/* Whether addr is cluster-internal (net 0), or, for a VPC (net != 0), inside
 * that VPC's own ranges.
 */
static __always_inline int sdn_is_internal(__u32 net,
					   const struct sdn_addr *addr)
{
	struct sdn_xnet_key k = {
		.prefixlen = 32 + 128,
		.net = 0,
		.ip = *addr,
	};

	if (bpf_map_lookup_elem(&sdn_internal, &k))
		return 1;
	if (!net)
		return 0;
	k.net = net;
	return bpf_map_lookup_elem(&sdn_internal, &k) != NULL;
}
