// SPDX-License-Identifier: GPL-2.0
/*
 * dm-lbs mapping: whole aligned blocks pass straight through to the device,
 * without a copy; the partial blocks at a bio's ends go to the block cache.
 */

#include <linux/io.h>

#include "dm-lbs.h"

void lbs_remap(struct lbs_c *lc, struct bio *bio)
{
	bio_set_dev(bio, lc->dev->bdev);
	/*
	 * An empty flush comes with whatever sector its bio had, and blk-mq
	 * fails any bio, even an empty one, that is not aligned to the
	 * device's logical block: a 64 KiB one on 6.15 and later.
	 */
	if (bio_sectors(bio) || op_is_zone_mgmt(bio_op(bio)))
		bio->bi_iter.bi_sector = lc->start +
			dm_target_offset(lc->ti, bio->bi_iter.bi_sector);
	else
		bio->bi_iter.bi_sector = lc->start;
}

/*
 * Note a pass-through write of blocks [first, first + count) before looking
 * at the cache.  The barrier pairs with the one in lbs_wait_pt_writes():
 * either this bio sees the block cached, or the block's first read sees
 * this write and waits for it.
 */
static void lbs_pt_begin(struct lbs_c *lc, struct lbs_bio *pb,
			 unsigned long first, unsigned int count)
{
	unsigned long flags;

	pb->pt_first = first;
	pb->pt_count = count;
	spin_lock_irqsave(&lc->pt_lock, flags);
	list_add_tail(&pb->pt_entry, &lc->pt_writes);
	spin_unlock_irqrestore(&lc->pt_lock, flags);
	smp_mb();	/* noted before the cache lookup */
}

/* Narrow the noted range, never leaving a moment where it is not noted. */
static void lbs_pt_trim(struct lbs_c *lc, struct lbs_bio *pb,
			unsigned int count)
{
	unsigned long flags;

	spin_lock_irqsave(&lc->pt_lock, flags);
	pb->pt_count = count;
	spin_unlock_irqrestore(&lc->pt_lock, flags);
}

static void lbs_pt_end(struct lbs_c *lc, struct lbs_bio *pb)
{
	unsigned long flags;

	spin_lock_irqsave(&lc->pt_lock, flags);
	list_del(&pb->pt_entry);
	pb->pt_count = 0;
	spin_unlock_irqrestore(&lc->pt_lock, flags);
	if (wq_has_sleeper(&lc->pt_wait))
		wake_up_all(&lc->pt_wait);
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
		if (!READ_ONCE(lc->wrote))
			WRITE_ONCE(lc->wrote, true);
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

/*
 * The device splits a bio that exceeds its limits where the limit falls,
 * rounded only to its own logical block size: mid-block for us.  The
 * constructor bounds max_io_len for page-sized bio_vecs, but smaller ones
 * (O_DIRECT from 512-byte aligned buffers), a virt boundary, or limits
 * lowered since then can still make a split.  So measure, the way
 * bio_split_rw() will, how much of @bio the device takes whole, and return
 * the whole blocks in it, up to @sectors.  0: not even the first block.
 */
static unsigned int lbs_pt_fit(struct lbs_c *lc, struct bio *bio,
			       unsigned int sectors)
{
	struct queue_limits *lim = &bdev_get_queue(lc->dev->bdev)->limits;
	unsigned int max_sectors, max_bytes, bytes = 0, nsegs = 0;
	struct bio_vec bv, prev = {};
	struct bvec_iter iter;
	sector_t dev_sector;

	if (!bio_has_data(bio))
		return sectors;
	max_sectors = min(sectors, lim->max_sectors);
	if (lim->chunk_sectors) {
		dev_sector = lc->start +
			dm_target_offset(lc->ti, bio->bi_iter.bi_sector);
		max_sectors = min(max_sectors,
				  lbs_chunk_sectors_left(dev_sector,
							 lim->chunk_sectors));
	}
	max_bytes = round_down(max_sectors, lc->block_sectors) << SECTOR_SHIFT;

	bio_for_each_bvec(bv, bio, iter) {
		unsigned int done = 0;

		if (prev.bv_len && lim->virt_boundary_mask &&
		    ((prev.bv_offset + prev.bv_len) | bv.bv_offset) &
		    lim->virt_boundary_mask)
			break;
		while (done < bv.bv_len && nsegs < lim->max_segments &&
		       bytes < max_bytes) {
			unsigned long mask = lim->seg_boundary_mask;
			unsigned long addr = page_to_phys(bv.bv_page) +
					     bv.bv_offset + done;
			unsigned int seg = min_not_zero(mask - (addr & mask) + 1,
						(unsigned long)lim->max_segment_size);

			/* Within one page, a bio_vec is always one segment. */
			if (bv.bv_offset + bv.bv_len <= PAGE_SIZE)
				seg = bv.bv_len;
			seg = min3(seg, bv.bv_len - done, max_bytes - bytes);
			nsegs++;
			bytes += seg;
			done += seg;
			if ((bv.bv_offset + done) & lim->virt_boundary_mask)
				break;
		}
		if (done < bv.bv_len || bytes >= max_bytes)
			break;
		prev = bv;
	}
	return round_down(bytes >> SECTOR_SHIFT, lc->block_sectors);
}

int lbs_map_bio(struct lbs_c *lc, struct bio *bio)
{
	struct dm_target *ti = lc->ti;
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

	whole = lbs_pt_fit(lc, bio, nr & ~mask);
	if (!whole) {
		/* Only a copy into one buffer keeps this block whole. */
		lbs_stat_inc(lc, LBS_PT_BOUNCED);
		dm_accept_partial_bio(bio, lc->block_sectors);
		return lbs_cache_map(lc, bio, first);
	}
	if (op_is_write(bio_op(bio)))
		lbs_pt_begin(lc, pb, first, whole >> lc->block_shift);
	if (lbs_cache_busy(lc, first, first + (whole >> lc->block_shift) - 1,
			   &found)) {
		if (found == first) {
			/* A cached block goes through the cache, one at a time. */
			if (pb->pt_count)
				lbs_pt_end(lc, pb);
			dm_accept_partial_bio(bio, lc->block_sectors);
			return lbs_cache_map(lc, bio, first);
		}
		/* Pass the blocks before it through. */
		if (pb->pt_count)
			lbs_pt_trim(lc, pb, found - first);
		whole = (found - first) << lc->block_shift;
	}
	if (whole < nr)
		dm_accept_partial_bio(bio, whole);
	return lbs_passthrough(lc, pb, bio);
}

void lbs_end_bio(struct lbs_c *lc, struct bio *bio, blk_status_t error)
{
	struct lbs_bio *pb = dm_per_bio_data(bio, sizeof(*pb));

	if (pb->pt_count)
		lbs_pt_end(lc, pb);
	/*
	 * Errors of bios served by the cache were counted by the cache.  The
	 * bio's size is spent by its completion (it reads 0): log no size.
	 */
	if (pb->remapped && error && error != BLK_STS_NOTSUPP) {
		lbs_stat_inc(lc, LBS_LOWER_ERRORS);
		DMERR_LIMIT("%s: error %d on %s at sector %llu%s",
			    dm_table_device_name(lc->ti->table),
			    blk_status_to_errno(error),
			    op_is_write(bio_op(bio)) ? "write" : "read",
			    (unsigned long long)bio->bi_iter.bi_sector,
			    bio->bi_opf & REQ_PREFLUSH ? " (flush)" : "");
	}
}

void lbs_set_limits(struct lbs_c *lc, struct queue_limits *limits)
{
	limits->logical_block_size = lc->lbs;
	limits->physical_block_size = lc->block_size;
	limits->alignment_offset = 0;
	limits->io_min = lc->block_size;
	limits->io_opt = lc->block_size;
	limits->discard_granularity = lc->block_size;
	limits->discard_alignment = 0;
}
