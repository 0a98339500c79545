// SPDX-License-Identifier: GPL-2.0
/*
 * dm-lbs status and messages: what "dmsetup status", "dmsetup table" and
 * "dmsetup message" see.  Field order is an interface: append only.
 */

#include "dm-lbs.h"

static unsigned int lbs_nr_opt_args(struct lbs_c *lc)
{
	return 2 * lc->lbs_set + 2 * lc->cache_set + 2 * lc->wb_delay_set +
	       2 * lc->tail_delay_set + lc->write_through +
	       lc->no_discard_passdown;
}

unsigned int lbs_emit_status(struct lbs_c *lc, status_type_t type,
			     char *result, unsigned int maxlen)
{
	unsigned int sz = 0;
	int i;

	switch (type) {
	case STATUSTYPE_INFO:
		DMEMIT("%d %d", atomic_read(&lc->nr_bufs),
		       atomic_read(&lc->nr_dirty));
		for (i = 0; i < LBS_NR_STATS; i++)
			DMEMIT(" %llu", (unsigned long long)
			       atomic64_read(&lc->stats[i]));
		break;

	case STATUSTYPE_TABLE:
		DMEMIT("%s %llu %u", lc->dev->name,
		       (unsigned long long)lc->start, lc->block_size);
		if (!lbs_nr_opt_args(lc))
			break;
		DMEMIT(" %u", lbs_nr_opt_args(lc));
		if (lc->lbs_set)
			DMEMIT(" logical_block_size %u", lc->lbs);
		if (lc->cache_set)
			DMEMIT(" cache_size %u", lc->cache_mb);
		if (lc->write_through)
			DMEMIT(" write_through");
		if (lc->no_discard_passdown)
			DMEMIT(" no_discard_passdown");
		if (lc->wb_delay_set)
			DMEMIT(" writeback_delay %u", lc->wb_delay_ms);
		if (lc->tail_delay_set)
			DMEMIT(" tail_delay %u", lc->tail_delay_ms);
		break;

	case STATUSTYPE_IMA:
		DMEMIT_TARGET_NAME_VERSION(lc->ti->type);
		DMEMIT(",device_name=%s,start=%llu,block_size=%u",
		       lc->dev->name, (unsigned long long)lc->start,
		       lc->block_size);
		DMEMIT(",logical_block_size=%u,cache_size=%u,write_through=%c",
		       lc->lbs, lc->cache_mb, lc->write_through ? 'y' : 'n');
		DMEMIT(",no_discard_passdown=%c,writeback_delay=%u,tail_delay=%u;",
		       lc->no_discard_passdown ? 'y' : 'n', lc->wb_delay_ms,
		       lc->tail_delay_set ? lc->tail_delay_ms : 0);
		break;
	}
	return sz;
}

static int lbs_process_flush_mesg(struct lbs_c *lc)
{
	int r = lbs_wb_write_all(lc);
	int f = blkdev_issue_flush(lc->dev->bdev);

	return r ?: f;
}

static int lbs_process_drop_cache_mesg(struct lbs_c *lc)
{
	int r = lbs_wb_write_all(lc);

	while (lbs_cache_evict(lc, ULONG_MAX))
		;
	return r;
}

static int lbs_process_clear_stats_mesg(struct lbs_c *lc)
{
	int i;

	for (i = 0; i < LBS_NR_STATS; i++)
		atomic64_set(&lc->stats[i], 0);
	return 0;
}

int lbs_process_message(struct lbs_c *lc, unsigned int argc, char **argv)
{
	if (argc != 1)
		return -EINVAL;
	/* A suspended table must not issue I/O or change under its owner. */
	if (dm_suspended(lc->ti))
		return -EBUSY;

	if (!strcasecmp(argv[0], "flush"))
		return lbs_process_flush_mesg(lc);
	if (!strcasecmp(argv[0], "drop_cache"))
		return lbs_process_drop_cache_mesg(lc);
	if (!strcasecmp(argv[0], "clear_stats"))
		return lbs_process_clear_stats_mesg(lc);

	DMWARN("Unrecognised message received: %s", argv[0]);
	return -EINVAL;
}
