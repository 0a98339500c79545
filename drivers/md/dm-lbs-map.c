// SPDX-License-Identifier: GPL-2.0
/*
 * dm-lbs mapping: whole aligned blocks pass straight through to the device,
 * without a copy; the partial blocks at a bio's ends go to the block cache.
 */

#include "dm-lbs.h"

void lbs_remap(struct lbs_c *lc, struct bio *bio)
{
	bio_set_dev(bio, lc->dev->bdev);
	if (bio_sectors(bio) || op_is_zone_mgmt(bio_op(bio)))
		bio->bi_iter.bi_sector = lc->start +
			dm_target_offset(lc->ti, bio->bi_iter.bi_sector);
}

static void lbs_pt_count(struct lbs_c *lc, struct lbs_bio *pb, int delta)
{
	unsigned int i, n = min_t(unsigned int, pb->pt_count, LBS_PT_BUCKETS);
	bool drained = false;

	for (i = 0; i < n; i++) {
		atomic_t *c = &lc->pt_inflight[lbs_pt_bucket(pb->pt_first + i)];

		if (delta > 0)
			atomic_inc(c);
		else if (atomic_dec_and_test(c))
			drained = true;
	}
	if (drained)
		wake_up_all(&lc->pt_wait);
}

/*
 * Count a pass-through write before looking at the cache.  The barrier pairs
 * with the one in lbs_wait_pt_writes(): either this bio sees the block
 * cached, or the block's first read waits for this write.
 */
static void lbs_pt_begin(struct lbs_c *lc, struct lbs_bio *pb,
			 unsigned long first, unsigned int count)
{
	pb->pt_first = first;
	pb->pt_count = count;
	lbs_pt_count(lc, pb, 1);
	smp_mb__after_atomic();	/* counted before the cache lookup */
}

/* @bio covers whole blocks only, none of them cached. */
static int lbs_passthrough(struct lbs_c *lc, struct lbs_bio *pb,
			   struct bio *bio)
{
	sector_t rel = dm_target_offset(lc->ti, bio->bi_iter.bi_sector);

	WARN_ON_ONCE((rel | bio_sectors(bio)) & (lc->block_sectors - 1));

	switch (bio_op(bio)) {
	case REQ_OP_READ:
		lbs_stat_inc(lc, LBS_PT_READS);
		lbs_stat_add(lc, LBS_LOWER_READ_BYTES, bio->bi_iter.bi_size);
		break;
	case REQ_OP_WRITE:
		lbs_stat_inc(lc, LBS_PT_WRITES);
		lbs_stat_add(lc, LBS_LOWER_WRITE_BYTES, bio->bi_iter.bi_size);
		break;
	case REQ_OP_DISCARD:
		if (lc->no_discard_passdown) {
			bio_endio(bio);
			return DM_MAPIO_SUBMITTED;
		}
		break;
	default:
		break;
	}
	pb->remapped = true;
	lbs_remap(lc, bio);
	return DM_MAPIO_REMAPPED;
}

int lbs_map(struct dm_target *ti, struct bio *bio)
{
	struct lbs_c *lc = ti->private;
	struct lbs_bio *pb = dm_per_bio_data(bio, sizeof(*pb));
	unsigned int mask = lc->block_sectors - 1;
	unsigned long first, found;
	unsigned int nr, whole;
	sector_t rel;

	pb->pt_count = 0;
	pb->remapped = false;

	if (bio->bi_opf & REQ_PREFLUSH) {
		if (lbs_wb_flush_needed(lc)) {
			lbs_wb_queue_flush(lc, bio);
			return DM_MAPIO_SUBMITTED;
		}
		pb->remapped = true;
		lbs_remap(lc, bio);
		return DM_MAPIO_REMAPPED;
	}
	if (!bio_sectors(bio)) {
		pb->remapped = true;
		lbs_remap(lc, bio);
		return DM_MAPIO_REMAPPED;
	}

	rel = dm_target_offset(ti, bio->bi_iter.bi_sector);
	nr = bio_sectors(bio);
	first = lbs_block_of(lc, rel);

	if ((rel & mask) || nr < lc->block_sectors) {
		/* Head (or all) of the bio is inside one block. */
		unsigned int len = min_t(unsigned int, nr,
					 lc->block_sectors - (rel & mask));

		if (len < nr)
			dm_accept_partial_bio(bio, len);
		if (bio_op(bio) == REQ_OP_DISCARD) {
			/* A device cannot discard part of its unit: ignore it. */
			bio_endio(bio);
			return DM_MAPIO_SUBMITTED;
		}
		return lbs_cache_map(lc, bio, first);
	}

	whole = nr & ~mask;
	if (op_is_write(bio_op(bio)))
		lbs_pt_begin(lc, pb, first, whole >> lc->block_shift);
	if (lbs_cache_busy(lc, first, first + (whole >> lc->block_shift) - 1,
			   &found)) {
		if (pb->pt_count) {
			lbs_pt_count(lc, pb, -1);
			pb->pt_count = 0;
		}
		if (found == first) {
			/* A cached block goes through the cache, one at a time. */
			dm_accept_partial_bio(bio, lc->block_sectors);
			return lbs_cache_map(lc, bio, first);
		}
		whole = (found - first) << lc->block_shift;
		if (op_is_write(bio_op(bio)))
			lbs_pt_begin(lc, pb, first, whole >> lc->block_shift);
	}
	if (whole < nr)
		dm_accept_partial_bio(bio, whole);
	return lbs_passthrough(lc, pb, bio);
}

int lbs_end_io(struct dm_target *ti, struct bio *bio, blk_status_t *error)
{
	struct lbs_c *lc = ti->private;
	struct lbs_bio *pb = dm_per_bio_data(bio, sizeof(*pb));

	if (pb->pt_count)
		lbs_pt_count(lc, pb, -1);
	/* Errors of bios served by the cache were counted by the cache. */
	if (pb->remapped && *error && *error != BLK_STS_NOTSUPP) {
		lbs_stat_inc(lc, LBS_LOWER_ERRORS);
		DMERR_LIMIT("%s: error %d on %s at sector %llu",
			    dm_table_device_name(ti->table),
			    blk_status_to_errno(*error),
			    op_is_write(bio_op(bio)) ? "write" : "read",
			    (unsigned long long)bio->bi_iter.bi_sector);
	}
	return DM_ENDIO_DONE;
}

void lbs_io_hints(struct dm_target *ti, struct queue_limits *limits)
{
	struct lbs_c *lc = ti->private;

	limits->logical_block_size = lc->lbs;
	limits->physical_block_size = lc->block_size;
	limits->alignment_offset = 0;
	limits->io_min = lc->block_size;
	limits->io_opt = lc->block_size;
	limits->discard_granularity = lc->block_size;
	limits->discard_alignment = 0;
}
