// SPDX-License-Identifier: GPL-2.0
/*
 * dm-lbs: big-sector devices under a small-sector page cache.
 *
 * Table line:
 *   <start> <len> lbs <dev> <offset> <block_size> [<#opt_args> <opt_args>...]
 *
 * This file parses the table, builds and tears down a target, holds the
 * target_type callbacks and registers the target type; the other files
 * provide what the callbacks call.  See docs/dm-lbs.rst.
 */

#include <linux/module.h>

#include "dm-lbs.h"

/* Optional arguments that take a value: its range and what is wrong. */
struct lbs_uint_opt {
	const char *name;
	struct dm_arg arg;	/* min, max, and the error for a bad value */
	char *missing, *duplicate;
};

enum {
	LBS_OPT_LBS, LBS_OPT_CACHE, LBS_OPT_WB_DELAY, LBS_OPT_TAIL_DELAY,
	LBS_NR_UINT_OPTS
};

static const struct lbs_uint_opt lbs_uint_opts[LBS_NR_UINT_OPTS] = {
	[LBS_OPT_LBS] = { "logical_block_size",
		{ SECTOR_SIZE, 4096, "Invalid logical_block_size" },
		"Missing value for logical_block_size",
		"Duplicate logical_block_size" },
	[LBS_OPT_CACHE] = { "cache_size",
		{ 1, LBS_MAX_CACHE_MB, "Invalid cache_size" },
		"Missing value for cache_size",
		"Duplicate cache_size" },
	[LBS_OPT_WB_DELAY] = { "writeback_delay",
		{ 1, LBS_MAX_WB_DELAY_MS, "Invalid writeback_delay" },
		"Missing value for writeback_delay",
		"Duplicate writeback_delay" },
	[LBS_OPT_TAIL_DELAY] = { "tail_delay",
		{ 1, LBS_MAX_TAIL_DELAY_MS, "Invalid tail_delay" },
		"Missing value for tail_delay",
		"Duplicate tail_delay" },
};

/* Optional arguments without a value. */
static const struct {
	const char *name;
	char *duplicate;
} lbs_flag_opts[] = {
	{ "write_through", "Duplicate write_through" },
	{ "no_discard_passdown", "Duplicate no_discard_passdown" },
};

static int lbs_parse_opts(struct dm_arg_set *as, struct lbs_c *lc,
			  struct dm_target *ti)
{
	static const struct dm_arg group = {
		0, 2 * LBS_NR_UINT_OPTS + ARRAY_SIZE(lbs_flag_opts),
		"Invalid number of optional arguments"
	};
	unsigned int *vals[LBS_NR_UINT_OPTS] = {
		&lc->lbs, &lc->cache_mb, &lc->wb_delay_ms, &lc->tail_delay_ms
	};
	bool *set[LBS_NR_UINT_OPTS] = {
		&lc->lbs_set, &lc->cache_set, &lc->wb_delay_set,
		&lc->tail_delay_set
	};
	bool *flags[ARRAY_SIZE(lbs_flag_opts)] = {
		&lc->write_through, &lc->no_discard_passdown
	};
	const struct lbs_uint_opt *o;
	unsigned int argc, i;
	const char *name;
	int r;

	if (!as->argc)
		return 0;
	r = dm_read_arg_group(&group, as, &argc, &ti->error);
	if (r)
		return r;

	while (argc) {
		name = dm_shift_arg(as);
		argc--;

		for (i = 0; i < ARRAY_SIZE(lbs_flag_opts); i++)
			if (!strcasecmp(name, lbs_flag_opts[i].name))
				break;
		if (i < ARRAY_SIZE(lbs_flag_opts)) {
			if (*flags[i]) {
				ti->error = lbs_flag_opts[i].duplicate;
				return -EINVAL;
			}
			*flags[i] = true;
			continue;
		}

		for (i = 0; i < LBS_NR_UINT_OPTS; i++)
			if (!strcasecmp(name, lbs_uint_opts[i].name))
				break;
		if (i == LBS_NR_UINT_OPTS) {
			ti->error = "Unrecognised optional argument";
			return -EINVAL;
		}
		o = &lbs_uint_opts[i];
		if (*set[i]) {
			ti->error = o->duplicate;
			return -EINVAL;
		}
		if (!argc) {
			ti->error = o->missing;
			return -EINVAL;
		}
		r = dm_read_arg(&o->arg, as, vals[i], &ti->error);
		if (r)
			return r;
		argc--;
		*set[i] = true;
	}

	if (lc->lbs_set && !is_power_of_2(lc->lbs)) {
		ti->error = lbs_uint_opts[LBS_OPT_LBS].arg.error;
		return -EINVAL;
	}
	if (lc->write_through && (lc->wb_delay_set || lc->tail_delay_set)) {
		ti->error = lc->wb_delay_set ?
			"writeback_delay conflicts with write_through" :
			"tail_delay conflicts with write_through";
		return -EINVAL;
	}
	if (as->argc) {
		ti->error = "Too many arguments";
		return -EINVAL;
	}
	return 0;
}

static int lbs_parse_geometry(struct dm_arg_set *as, struct lbs_c *lc,
			      struct dm_target *ti, const char **devname)
{
	unsigned long long offset;
	const char *arg;
	char dummy;

	*devname = dm_shift_arg(as);

	arg = dm_shift_arg(as);
	if (sscanf(arg, "%llu%c", &offset, &dummy) != 1 ||
	    offset != (sector_t)offset) {
		ti->error = "Invalid offset";
		return -EINVAL;
	}
	lc->start = offset;

	arg = dm_shift_arg(as);
	if (kstrtouint(arg, 10, &lc->block_size) ||
	    !is_power_of_2(lc->block_size) ||
	    lc->block_size < LBS_MIN_BLOCK_SIZE ||
	    lc->block_size > LBS_MAX_BLOCK_SIZE) {
		ti->error = "Invalid block size";
		return -EINVAL;
	}
	if (lc->block_size < PAGE_SIZE) {
		ti->error = "Block size smaller than a page";
		return -EINVAL;
	}
	lc->block_sectors = lc->block_size >> SECTOR_SHIFT;
	lc->block_shift = ilog2(lc->block_sectors);
	lc->pages_per_block = lc->block_size >> PAGE_SHIFT;

	if (lc->start & (lc->block_sectors - 1)) {
		ti->error = "Offset not a multiple of block size";
		return -EINVAL;
	}
	if (ti->len & (lc->block_sectors - 1)) {
		ti->error = "Length not a multiple of block size";
		return -EINVAL;
	}
	return 0;
}

/* Can the device take our requests without splitting a block? */
static int lbs_check_device(struct lbs_c *lc, struct dm_target *ti)
{
	struct block_device *bdev = lc->dev->bdev;
	struct request_queue *q = bdev_get_queue(bdev);
	unsigned int max_io;

	if ((dm_table_get_mode(ti->table) & LBS_MODE_WRITE) &&
	    bdev_read_only(bdev)) {
		ti->error = "Device is read-only";
		return -EROFS;
	}
	if (lc->block_size < bdev_logical_block_size(bdev)) {
		ti->error = "Block size smaller than the device's logical block size";
		return -EINVAL;
	}
	/* At least twice the exposed sector: 8 KiB minimum, 4 KiB sectors. */
	BUILD_BUG_ON(LBS_MIN_BLOCK_SIZE < 2 * 4096);
	if (lc->start + ti->len > bdev_nr_sectors(bdev) ||
	    lc->start + ti->len < lc->start) {
		ti->error = "Device too small for the mapping";
		return -EINVAL;
	}
	if (queue_max_sectors(q) < lc->block_sectors) {
		/* The block layer would split our blocks: raise max_sectors_kb. */
		ti->error = "Block size exceeds the device's max_sectors_kb";
		return -EINVAL;
	}
	if (queue_max_segments(q) < lc->pages_per_block) {
		ti->error = "Block size needs more segments than the device takes";
		return -EINVAL;
	}

	/*
	 * The device splits what exceeds its limits wherever they fall:
	 * keep pass-through bios within them, cut at block boundaries.
	 */
	max_io = min_t(unsigned int, queue_max_sectors(q),
		       (queue_max_segments(q) - 1) << (PAGE_SHIFT - SECTOR_SHIFT));
	max_io = max(rounddown(max_io, lc->block_sectors), lc->block_sectors);
	return dm_set_target_max_io_len(ti, max_io);
}

/*
 * The cache holds acknowledged data that only reaches the device through
 * more memory (bios, a fill buffer) and, on nbd or iSCSI, a userspace
 * server: never let it take more than a slice of RAM, whatever was asked.
 */
static void lbs_size_cache(struct lbs_c *lc)
{
	u64 limit = ((u64)totalram_pages() << PAGE_SHIFT) / LBS_CACHE_RAM_DIV;
	u64 want = (u64)lc->cache_mb << 20;

	if (want > limit) {
		DMWARN("%s: cache_size %u MiB capped at %llu MiB (1/%u of memory)",
		       dm_table_device_name(lc->ti->table), lc->cache_mb,
		       limit >> 20, LBS_CACHE_RAM_DIV);
		want = limit;
	}
	lc->max_blocks = max_t(u64, LBS_MIN_CACHE_BLOCKS, want / lc->block_size);
}

static void lbs_destroy(struct lbs_c *lc)
{
	if (lc->flush_wq)
		destroy_workqueue(lc->flush_wq);
	if (lc->wq)
		destroy_workqueue(lc->wq);
	lbs_cache_exit(lc);
	bioset_exit(&lc->bs);
	if (lc->dev)
		dm_put_device(lc->ti, lc->dev);
	kfree(lc);
}

static int lbs_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	struct dm_arg_set as = { .argc = argc, .argv = argv };
	const char *devname;
	struct lbs_c *lc;
	int r, i;

	if (argc < 3) {
		ti->error = "Invalid argument count";
		return -EINVAL;
	}
	lc = kzalloc(sizeof(*lc), GFP_KERNEL);
	if (!lc) {
		ti->error = "Cannot allocate context";
		return -ENOMEM;
	}
	lc->ti = ti;
	lc->lbs = 4096;
	lc->cache_mb = LBS_DEFAULT_CACHE_MB;
	lc->wb_delay_ms = LBS_DEFAULT_WB_DELAY_MS;

	r = lbs_parse_geometry(&as, lc, ti, &devname);
	if (!r)
		r = lbs_parse_opts(&as, lc, ti);
	if (r)
		goto bad;

	r = dm_get_device(ti, devname, dm_table_get_mode(ti->table), &lc->dev);
	if (r) {
		ti->error = "Device lookup failed";
		goto bad;
	}
	r = lbs_check_device(lc, ti);
	if (r)
		goto bad;

	lbs_size_cache(lc);
	r = -ENOMEM;
	lc->wq = alloc_workqueue("kdmlbs/%s", WQ_MEM_RECLAIM | WQ_UNBOUND, 0,
				 dm_table_device_name(ti->table));
	/* Flushes and the timer, one at a time; they only wait on lc->wq. */
	lc->flush_wq = alloc_ordered_workqueue("kdmlbs_flush/%s", WQ_MEM_RECLAIM,
					       dm_table_device_name(ti->table));
	if (!lc->wq || !lc->flush_wq) {
		ti->error = "Cannot allocate workqueue";
		goto bad;
	}
	r = bioset_init(&lc->bs, BIO_POOL_SIZE, 0, BIOSET_NEED_BVECS);
	if (r) {
		ti->error = "Cannot allocate bioset";
		goto bad;
	}
	r = lbs_cache_init(lc);
	if (r) {
		ti->error = "Cannot allocate block cache";
		goto bad;
	}
	lbs_wb_init(lc);
	for (i = 0; i < LBS_NR_STATS; i++)
		atomic64_set(&lc->stats[i], 0);

	ti->num_flush_bios = 1;
	ti->num_discard_bios = 1;
	ti->num_write_zeroes_bios = 1;
	ti->per_io_data_size = sizeof(struct lbs_bio);
	/* Flushes and discards we resubmit go through dm_submit_bio_remap(). */
	ti->accounts_remapped_io = true;
	/* Write-back holds acknowledged data: ask for flushes. */
	ti->flush_supported = !lc->write_through;
	ti->discards_supported = lc->no_discard_passdown;
	ti->private = lc;
	return 0;

bad:
	lbs_destroy(lc);
	return r;
}

static void lbs_dtr(struct dm_target *ti)
{
	struct lbs_c *lc = ti->private;

	/* Suspended already: nothing new comes in; write what is left. */
	lbs_wb_stop_timer(lc);
	flush_workqueue(lc->flush_wq);
	lbs_wb_write_all(lc);
	flush_workqueue(lc->wq);
	lbs_destroy(lc);
}

static int lbs_map(struct dm_target *ti, struct bio *bio)
{
	return lbs_map_bio(ti->private, bio);
}

static int lbs_end_io(struct dm_target *ti, struct bio *bio,
		      blk_status_t *error)
{
	lbs_end_bio(ti->private, bio, *error);
	return DM_ENDIO_DONE;
}

static void lbs_io_hints(struct dm_target *ti, struct queue_limits *limits)
{
	lbs_set_limits(ti->private, limits);
}

static void lbs_presuspend(struct dm_target *ti)
{
	lbs_wb_write_all(ti->private);
}

static void lbs_postsuspend(struct dm_target *ti)
{
	lbs_wb_suspend(ti->private);
}

static void lbs_resume(struct dm_target *ti)
{
	lbs_wb_start_timer(ti->private);
}

static void lbs_status(struct dm_target *ti, status_type_t type,
		       unsigned int status_flags, char *result,
		       unsigned int maxlen)
{
	lbs_emit_status(ti->private, type, result, maxlen);
}

static int lbs_message(struct dm_target *ti, unsigned int argc, char **argv,
		       char *result, unsigned int maxlen)
{
	return lbs_process_message(ti->private, argc, argv);
}

static int lbs_iterate_devices(struct dm_target *ti,
			       iterate_devices_callout_fn fn, void *data)
{
	struct lbs_c *lc = ti->private;

	return fn(ti, lc->dev, lc->start, ti->len, data);
}

static struct target_type lbs_target = {
	.name		 = "lbs",
	.version	 = {1, 2, 0},
	.module		 = THIS_MODULE,
	.ctr		 = lbs_ctr,
	.dtr		 = lbs_dtr,
	.map		 = lbs_map,
	.end_io		 = lbs_end_io,
	.presuspend	 = lbs_presuspend,
	.postsuspend	 = lbs_postsuspend,
	.resume		 = lbs_resume,
	.status		 = lbs_status,
	.message	 = lbs_message,
	.io_hints	 = lbs_io_hints,
	.iterate_devices = lbs_iterate_devices,
};

static int __init dm_lbs_init(void)
{
	int r = dm_register_target(&lbs_target);

	if (r < 0)
		DMERR("register failed %d", r);
	return r;
}

static void __exit dm_lbs_exit(void)
{
	dm_unregister_target(&lbs_target);
}

module_init(dm_lbs_init);
module_exit(dm_lbs_exit);

MODULE_DESCRIPTION(DM_NAME " target for devices with blocks larger than a page");
MODULE_LICENSE("GPL");
