/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The policy layers' drops per layer, net and reason (sdn_pol_drops). */
#pragma once

#include "common.h"

/*
 * Counts a policed packet's refusal in sdn_pol_drops and returns ret as it
 * came: 0 (passed, not counted), a DROP_POL_* (counted under {net, layer,
 * -ret}) or another DROP_* (not a policy's: sdn_drops alone counts it). Its
 * own frame, so that the key and the zero entry stay off the callers' stacks.
 */
static __sdn_noinline int sdn_pol_count(__u32 len, __u32 net, __u32 layer,
					int ret)
{
	struct sdn_pol_drop_key k = {};
	struct sdn_drop_stats zero = {}, *st;

	if (ret > DROP_POL_NP ||
	    (ret < DROP_POL_REVOKED && ret != DROP_POL_ANP &&
	     ret != DROP_POL_BANP))
		return ret;
	k.net = net;
	k.layer = layer;
	k.reason = -ret;
	st = bpf_map_lookup_elem(&sdn_pol_drops, &k);
	if (!st) {
		/* Another CPU may have created it meanwhile: NOEXIST keeps
		 * its counts.
		 */
		bpf_map_update_elem(&sdn_pol_drops, &k, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&sdn_pol_drops, &k);
		if (!st)
			return ret;
	}
	st->packets++;
	st->bytes += len;
	return ret;
}
