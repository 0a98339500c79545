// SPDX-License-Identifier: GPL-2.0
/*
 * dm-lbs block cache: whole-block buffers and the per-block state machine.
 *
 * Each cached block is one buffer holding the whole device block, in one
 * compound page when the allocator can give us one, so that its request to
 * the device is one bio_vec and one scatter/gather segment.  Bios that touch
 * part of a block queue on that block and are served by its work item:
 * different blocks proceed in parallel, one block's bios in arrival order.
 *
 * The work item never sleeps for memory: when it cannot get a cache slot or
 * a buffer it parks the block, and a freed buffer or an idle block wakes it.
 * map() never sleeps either: what it cannot queue without waiting goes to
 * lc->deferred and a worker queues it.
 *
 * States (bits of blk->flags):
 *
 *   valid[]     sectors of buf that hold the block's current data; all of
 *               them after a read (FILLED when it served a write)
 *   DIRTY       some valid sector is acknowledged but not on the device.
 *               Set by a partial write; cleared when the block's write
 *               completes, or when the block is discarded or lost.  Mirrored
 *               by LBS_MARK_DIRTY in lc->blocks, and its absence by
 *               LBS_MARK_CLEAN (so eviction never walks dirty blocks), under
 *               blk->lock
 *   OPEN        DIRTY, and its data is one run ending where the latest
 *               write ended: a sequential writer's block, which waits
 *               tail_delay rather than writeback_delay for the rest
 *   WB_WANTED   write it back (timer, pressure, flush); the work item turns
 *               it into a fill (RMW read) and a write, or into nothing
 *   FLUSH_PENDING  a flush waits for this block to be clean; mirrored by
 *               LBS_MARK_FLUSH, set and cleared with it under blk->lock
 *   IO, IO_DONE one request to the device in flight; completion sets IO_DONE
 *               and runs the work item, which alone clears both
 *   PARKED      on lc->parked, waiting for a slot or memory
 *   REFERENCED  hit since the eviction clock last passed
 *   DEAD        out of lc->blocks (set under blk->lock): lookups retry
 *
 * A block is evictable when only the cache holds it and it is none of
 * IO, DIRTY, WB_WANTED, FLUSH_PENDING, PARKED, and has no bios.
 *
 * References (blk->ref): one for lc->blocks until eviction; one for each
 * queued run of the work item (taken by whoever queues it, dropped when the
 * run ends); one for the request in flight; one while PARKED; and one for
 * each walker between lbs_block_next() and lbs_block_put().  Lookups in
 * lc->blocks run under RCU and take blk->lock (map) or a reference only if
 * the count is not already zero (walkers); blocks are freed after a grace
 * period.
 *
 * Lock order: blk->lock, then the xarray's lock (xa_erase, marks).
 * lc->park_lock, pt_lock, flush_lock and defer_lock nest in nothing and
 * take nothing.  Only the work item touches buf, fill and valid[].
 */

#include <linux/highmem.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>

#include "dm-lbs.h"

#define LBS_BLOCK_POOL_MIN	16
#define LBS_BUF_POOL_MIN	2
#define LBS_BOUNCE_POOL_MIN	1

/* A block with any of these is not evictable. */
#define LBS_B_BUSY_MASK	(BIT(LBS_B_IO) | BIT(LBS_B_DIRTY) | BIT(LBS_B_DEAD) | \
			 BIT(LBS_B_WB_WANTED) | BIT(LBS_B_FLUSH_PENDING) | \
			 BIT(LBS_B_PARKED))

/* ---------------------------------------------------------------- buffers */

static void *lbs_buf_alloc(gfp_t gfp, void *data)
{
	struct lbs_c *lc = data;
	struct lbs_buf *buf;
	unsigned int i;

	buf = kmalloc(struct_size(buf, pages, lc->pages_per_block), gfp);
	if (!buf)
		return NULL;

	buf->folio = folio_alloc(gfp | __GFP_NORETRY | __GFP_NOWARN,
				 get_order(lc->block_size));
	if (buf->folio)
		return buf;

	/* Fragmented memory must not fail I/O: build the block from pages. */
	for (i = 0; i < lc->pages_per_block; i++) {
		buf->pages[i] = alloc_page(gfp);
		if (!buf->pages[i]) {
			while (i--)
				__free_page(buf->pages[i]);
			kfree(buf);
			return NULL;
		}
	}
	lbs_stat_inc(lc, LBS_ALLOC_FALLBACKS);
	return buf;
}

static void lbs_buf_free(void *element, void *data)
{
	struct lbs_c *lc = data;
	struct lbs_buf *buf = element;
	unsigned int i;

	if (buf->folio) {
		folio_put(buf->folio);
	} else {
		for (i = 0; i < lc->pages_per_block; i++)
			__free_page(buf->pages[i]);
	}
	kfree(buf);
}

/* Never waits: the allocator without retries first, then the reserve. */
static struct lbs_buf *lbs_buf_get(struct lbs_c *lc, mempool_t *pool)
{
	struct lbs_buf *buf;

	buf = lbs_buf_alloc(GFP_NOIO | __GFP_NORETRY | __GFP_NOWARN, lc);
	if (!buf)
		buf = mempool_alloc(pool, GFP_NOWAIT | __GFP_NOWARN);
	return buf;
}

static void lbs_buf_put(struct lbs_c *lc, struct lbs_buf *buf, mempool_t *pool)
{
	mempool_free(buf, pool);
	atomic_inc(&lc->free_gen);
	smp_mb__after_atomic();	/* pairs with lbs_park(): count, then look */
}

static struct page *lbs_buf_page(struct lbs_buf *buf, unsigned int i)
{
	return buf->folio ? folio_page(buf->folio, i) : buf->pages[i];
}

/* Copy between a buffer at byte offset @off and @ptr; NULL @ptr zeroes. */
static void lbs_buf_copy(struct lbs_buf *buf, unsigned int off, void *ptr,
			 unsigned int len, bool to_ptr)
{
	while (len) {
		unsigned int po = offset_in_page(off);
		unsigned int n = min_t(unsigned int, len, PAGE_SIZE - po);
		char *addr = kmap_local_page(lbs_buf_page(buf, off >> PAGE_SHIFT));

		if (!ptr)
			memset(addr + po, 0, n);
		else if (to_ptr)
			memcpy(ptr, addr + po, n);
		else
			memcpy(addr + po, ptr, n);
		kunmap_local(addr);
		if (ptr)
			ptr += n;
		off += n;
		len -= n;
	}
}

static void lbs_buf_copy_buf(struct lbs_buf *dst, struct lbs_buf *src,
			     unsigned int off, unsigned int len)
{
	while (len) {
		unsigned int po = offset_in_page(off);
		unsigned int n = min_t(unsigned int, len, PAGE_SIZE - po);
		char *s = kmap_local_page(lbs_buf_page(src, off >> PAGE_SHIFT));

		lbs_buf_copy(dst, off, s + po, n, false);
		kunmap_local(s);
		off += n;
		len -= n;
	}
}

static void lbs_copy_bio(struct lbs_buf *buf, struct bio *bio,
			 unsigned int off, bool to_bio)
{
	struct bvec_iter iter;
	struct bio_vec bv;

	bio_for_each_segment(bv, bio, iter) {
		char *p = bvec_kmap_local(&bv);

		lbs_buf_copy(buf, off, p, bv.bv_len, to_bio);
		kunmap_local(p);
		if (to_bio)
			flush_dcache_page(bv.bv_page);
		off += bv.bv_len;
	}
}

/* ---------------------------------------------------------------- blocks */

static void lbs_block_rcu_free(struct rcu_head *rcu)
{
	struct lbs_block *blk = container_of(rcu, struct lbs_block, rcu);

	mempool_free(blk, blk->lc->block_pool);
}

static void lbs_unpark_all(struct lbs_c *lc)
{
	struct lbs_block *blk, *tmp;
	unsigned long flags;
	LIST_HEAD(list);

	if (list_empty_careful(&lc->parked))
		return;
	spin_lock_irqsave(&lc->park_lock, flags);
	list_splice_init(&lc->parked, &list);
	spin_unlock_irqrestore(&lc->park_lock, flags);

	list_for_each_entry_safe(blk, tmp, &list, park) {
		list_del_init(&blk->park);
		clear_bit(LBS_B_PARKED, &blk->flags);
		/* The parked reference goes to the work item. */
		if (!queue_work(lc->wq, &blk->work))
			lbs_block_put(blk);
	}
}

static void lbs_block_free(struct lbs_block *blk)
{
	struct lbs_c *lc = blk->lc;

	WARN_ON_ONCE(blk->fill || !bio_list_empty(&blk->bios));
	if (blk->buf) {
		lbs_buf_put(lc, blk->buf, lc->buf_pool);
		atomic_dec(&lc->nr_bufs);
	}
	call_rcu(&blk->rcu, lbs_block_rcu_free);
	lbs_unpark_all(lc);
}

void lbs_block_put(struct lbs_block *blk)
{
	struct lbs_c *lc = blk->lc;
	int left = atomic_dec_return(&blk->ref);

	if (!left) {
		lbs_block_free(blk);
	} else if (left == 1 && !(READ_ONCE(blk->flags) & LBS_B_BUSY_MASK)) {
		/*
		 * Only the cache holds it now, and it is idle: it may be
		 * evictable.  A busy block's flags are cleared by its work
		 * item, which holds a reference until after: its put (or a
		 * later one) comes back here.  Waking the parked blocks on
		 * every walker's put of a dirty block costs each of them a
		 * futile eviction pass.
		 */
		atomic_inc(&lc->free_gen);
		smp_mb__after_atomic();	/* pairs with lbs_park() */
		lbs_unpark_all(lc);
	}
}

/* Run the block's state machine; the caller's reference moves to the work. */
static void lbs_block_run(struct lbs_block *blk)
{
	if (!queue_work(blk->lc->wq, &blk->work))
		lbs_block_put(blk);
}

void lbs_block_queue(struct lbs_block *blk)
{
	atomic_inc(&blk->ref);
	lbs_block_run(blk);
}

/*
 * Wait for a slot (@for_slot) or for memory.  Whoever frees either, or
 * leaves a block idle (evictable), bumps free_gen before looking at the
 * parked list, and we look at free_gen after joining it: one of the two
 * sees the other.  @gen is free_gen as read before the attempt that
 * failed, so that what freed memory during the attempt is not missed.
 */
static void lbs_park(struct lbs_block *blk, bool for_slot, int gen)
{
	struct lbs_c *lc = blk->lc;
	unsigned long flags;

	spin_lock_irqsave(&lc->park_lock, flags);
	if (!test_and_set_bit(LBS_B_PARKED, &blk->flags)) {
		atomic_inc(&blk->ref);
		list_add_tail(&blk->park, &lc->parked);
	}
	spin_unlock_irqrestore(&lc->park_lock, flags);
	smp_mb();	/* joined the list before reading free_gen */

	if (atomic_read(&lc->free_gen) != gen ||
	    (for_slot && atomic_read(&lc->nr_bufs) < lc->max_blocks))
		lbs_unpark_all(lc);
}

static bool lbs_block_try_evict(struct lbs_c *lc, struct lbs_block *blk)
{
	bool evict = false;

	spin_lock(&blk->lock);
	if (test_and_clear_bit(LBS_B_REFERENCED, &blk->flags))
		goto out;
	if (atomic_read(&blk->ref) != 1 || !bio_list_empty(&blk->bios))
		goto out;
	if (blk->flags & LBS_B_BUSY_MASK)
		goto out;
	set_bit(LBS_B_DEAD, &blk->flags);
	xa_erase(&lc->blocks, blk->index);
	evict = true;
out:
	spin_unlock(&blk->lock);
	return evict;
}

#define LBS_EVICT_BATCH		64	/* blocks looked at per RCU section */

/*
 * Second-chance clock over the clean cached blocks (dirty ones cannot go
 * before their write-back, and a cache full of them is the common case
 * under random writes); returns how many were freed.
 * A victim is on the list with the cache's reference, so the RCU section
 * can end between batches.
 */
unsigned long lbs_cache_evict(struct lbs_c *lc, unsigned long nr)
{
	unsigned long index = READ_ONCE(lc->clock_hand);
	unsigned long budget = 2UL * lc->max_blocks + LBS_EVICT_BATCH;
	struct lbs_block *blk, *tmp;
	unsigned long freed = 0, seen = 0;
	LIST_HEAD(victims);
	int wraps = 0;

	rcu_read_lock();
	while (freed < nr && budget--) {
		if (++seen % LBS_EVICT_BATCH == 0) {
			rcu_read_unlock();
			cond_resched();
			rcu_read_lock();
		}
		blk = xa_find(&lc->blocks, &index, ULONG_MAX, LBS_MARK_CLEAN);
		if (!blk) {
			if (++wraps > 2)
				break;
			index = 0;
			continue;
		}
		if (lbs_block_try_evict(lc, blk)) {
			list_add(&blk->park, &victims);
			freed++;
		}
		index++;
	}
	rcu_read_unlock();
	WRITE_ONCE(lc->clock_hand, index);

	list_for_each_entry_safe(blk, tmp, &victims, park) {
		list_del_init(&blk->park);
		lbs_block_put(blk);	/* the cache's reference */
	}
	return freed;
}

/*
 * The next cached block at or after *index that has @mark (XA_PRESENT: any),
 * with a reference held.
 */
struct lbs_block *lbs_block_next(struct lbs_c *lc, unsigned long *index,
				 xa_mark_t mark)
{
	struct lbs_block *blk;

	rcu_read_lock();
	for (;;) {
		blk = xa_find(&lc->blocks, index, ULONG_MAX, mark);
		if (!blk || atomic_inc_not_zero(&blk->ref))
			break;
		(*index)++;
	}
	rcu_read_unlock();
	return blk;
}

bool lbs_cache_busy(struct lbs_c *lc, unsigned long first, unsigned long last,
		    unsigned long *found)
{
	*found = first;
	return xa_find(&lc->blocks, found, last, XA_PRESENT);
}

static bool lbs_block_get_buf(struct lbs_block *blk)
{
	struct lbs_c *lc = blk->lc;
	int gen = atomic_read(&lc->free_gen);
	bool for_slot = true;
	int tries;

	smp_rmb();	/* free_gen before the count and the blocks we look at */
	for (tries = 0; tries < 2; tries++) {
		if (atomic_inc_return(&lc->nr_bufs) <= lc->max_blocks) {
			blk->buf = lbs_buf_get(lc, lc->buf_pool);
			if (blk->buf)
				return true;
			for_slot = false;	/* a slot, but no memory */
		}
		atomic_dec(&lc->nr_bufs);
		if (!lbs_cache_evict(lc, 1))
			break;
	}
	/*
	 * Full of dirty or busy blocks.  Writes in flight will leave clean
	 * blocks behind: wait for those.  Otherwise make some clean; a block
	 * written now that is still being filled costs a read.
	 */
	if (!lc->write_through && !atomic_read(&lc->nr_writing))
		lbs_wb_kick(lc, 4);
	lbs_park(blk, for_slot, gen);
	return false;
}

static bool lbs_pt_write_over(struct lbs_c *lc, unsigned long index)
{
	struct lbs_bio *pb;
	unsigned long flags;
	bool found = false;

	spin_lock_irqsave(&lc->pt_lock, flags);
	list_for_each_entry(pb, &lc->pt_writes, pt_entry) {
		if (index - pb->pt_first < pb->pt_count) {
			found = true;
			break;
		}
	}
	spin_unlock_irqrestore(&lc->pt_lock, flags);
	return found;
}

static void lbs_wait_pt_writes(struct lbs_c *lc, unsigned long index)
{
	/*
	 * A pass-through write mapped before this block was cached may still
	 * be in flight; reading under it would cache stale data.  Writes
	 * mapped since see the block and do not cover it: the wait is
	 * bounded.  Pairs with the barrier in lbs_pt_begin().
	 */
	smp_mb();
	wait_event(lc->pt_wait, !lbs_pt_write_over(lc, index));
}

/* ---------------------------------------------------------- device I/O */

static void lbs_block_endio(struct bio *bio)
{
	struct lbs_block *blk = bio->bi_private;

	blk->io_status = bio->bi_status;
	bio_put(bio);
	/* io_status must be visible before the worker sees IO_DONE. */
	smp_mb__before_atomic();
	set_bit(LBS_B_IO_DONE, &blk->flags);
	lbs_block_run(blk);	/* the I/O's reference */
}

static void lbs_block_submit(struct lbs_block *blk, struct lbs_buf *buf,
			     blk_opf_t opf)
{
	struct lbs_c *lc = blk->lc;
	unsigned int nr_vecs = buf->folio ? 1 : lc->pages_per_block;
	struct bio *bio;
	unsigned int i;

	bio = bio_alloc_bioset(lc->dev->bdev, nr_vecs, opf, GFP_NOIO, &lc->bs);
	bio->bi_iter.bi_sector = lc->start +
		((sector_t)blk->index << lc->block_shift);
	if (buf->folio) {
		/* One bio_vec for the whole block; the bio has room for it. */
		__bio_add_page(bio, &buf->folio->page, lc->block_size, 0);
	} else {
		for (i = 0; i < nr_vecs; i++)
			__bio_add_page(bio, buf->pages[i], PAGE_SIZE, 0);
	}
	/* The device below only ever sees whole, aligned blocks. */
	WARN_ON_ONCE(bio->bi_iter.bi_size != lc->block_size ||
		     (bio->bi_iter.bi_sector - lc->start) &
		     (lc->block_sectors - 1));

	bio->bi_end_io = lbs_block_endio;
	bio->bi_private = blk;
	blk->io_write = op_is_write(opf);
	lbs_stat_add(lc, blk->io_write ? LBS_LOWER_WRITE_BYTES :
		     LBS_LOWER_READ_BYTES, lc->block_size);
	if (blk->io_write) {
		atomic_inc(&lc->nr_writing);
		if (!READ_ONCE(lc->wrote))
			WRITE_ONCE(lc->wrote, true);
	}
	set_bit(LBS_B_IO, &blk->flags);
	atomic_inc(&blk->ref);
	submit_bio_noacct(bio);
}

/* Read the block; under dirty sectors through a bounce, or park for one. */
static void lbs_block_fill(struct lbs_block *blk, bool for_write, bool for_wb)
{
	struct lbs_c *lc = blk->lc;

	if (!bitmap_empty(blk->valid, lc->block_sectors)) {
		int gen = atomic_read(&lc->free_gen);

		smp_rmb();	/* free_gen before the pool */
		blk->fill = lbs_buf_get(lc, lc->bounce_pool);
		if (!blk->fill) {
			lbs_park(blk, false, gen);
			return;
		}
	}
	if (for_write) {
		set_bit(LBS_B_FILLED, &blk->flags);
		lbs_stat_inc(lc, LBS_RMW_READS);
	}
	blk->fill_for_wb = for_wb;
	lbs_wait_pt_writes(lc, blk->index);
	lbs_block_submit(blk, blk->fill ?: blk->buf, REQ_OP_READ | REQ_SYNC);
}

static void lbs_block_write(struct lbs_block *blk, blk_opf_t extra)
{
	struct lbs_c *lc = blk->lc;

	if (!test_bit(LBS_B_FILLED, &blk->flags))
		lbs_stat_inc(lc, LBS_GATHERED);
	lbs_stat_inc(lc, LBS_CACHE_WRITES);
	clear_bit(LBS_B_WB_WANTED, &blk->flags);
	lbs_block_submit(blk, blk->buf, REQ_OP_WRITE | REQ_SYNC | extra);
}

/*
 * Is the block's data one run ending at @end with nothing after it?  Then a
 * sequential writer is filling it and the rest is likely on its way.
 */
static bool lbs_block_open(struct lbs_block *blk, unsigned int end)
{
	unsigned int bs = blk->lc->block_sectors;
	unsigned int first = find_first_bit(blk->valid, bs);

	return end < bs && find_next_bit(blk->valid, bs, end) >= bs &&
	       find_next_zero_bit(blk->valid, bs, first) == end;
}

static void lbs_block_set_dirty(struct lbs_block *blk, unsigned int end)
{
	struct lbs_c *lc = blk->lc;

	WRITE_ONCE(blk->written, jiffies);
	if (lbs_block_open(blk, end))
		set_bit(LBS_B_OPEN, &blk->flags);
	else
		clear_bit(LBS_B_OPEN, &blk->flags);
	if (test_bit(LBS_B_DIRTY, &blk->flags))
		return;
	spin_lock(&blk->lock);
	set_bit(LBS_B_DIRTY, &blk->flags);
	WRITE_ONCE(blk->dirtied, blk->written);
	atomic_inc(&lc->nr_dirty);
	xa_set_mark(&lc->blocks, blk->index, LBS_MARK_DIRTY);
	xa_clear_mark(&lc->blocks, blk->index, LBS_MARK_CLEAN);
	spin_unlock(&blk->lock);
}

/* For lbs_wb_write_all(): true if the block is dirty and now flagged. */
bool lbs_block_flag_flush(struct lbs_block *blk)
{
	bool dirty;

	spin_lock(&blk->lock);
	dirty = test_bit(LBS_B_DIRTY, &blk->flags);
	if (dirty) {
		set_bit(LBS_B_FLUSH_PENDING, &blk->flags);
		xa_set_mark(&blk->lc->blocks, blk->index, LBS_MARK_FLUSH);
		set_bit(LBS_B_WB_WANTED, &blk->flags);
	}
	spin_unlock(&blk->lock);
	return dirty;
}

/* Written, discarded or lost: nothing left to write, no flush waits for it. */
static void lbs_block_set_clean(struct lbs_block *blk)
{
	struct lbs_c *lc = blk->lc;
	bool flushed;

	spin_lock(&blk->lock);
	if (test_and_clear_bit(LBS_B_DIRTY, &blk->flags)) {
		/* Was dirty, so not evicted: the index is still this block's. */
		atomic_dec(&lc->nr_dirty);
		xa_clear_mark(&lc->blocks, blk->index, LBS_MARK_DIRTY);
		xa_set_mark(&lc->blocks, blk->index, LBS_MARK_CLEAN);
	}
	flushed = test_and_clear_bit(LBS_B_FLUSH_PENDING, &blk->flags);
	if (flushed)
		xa_clear_mark(&lc->blocks, blk->index, LBS_MARK_FLUSH);
	spin_unlock(&blk->lock);
	clear_bit(LBS_B_OPEN, &blk->flags);
	clear_bit(LBS_B_FILLED, &blk->flags);
	clear_bit(LBS_B_WB_WANTED, &blk->flags);
	if (flushed)
		wake_up_all(&lc->wb_wait);
}

/* The device failed us: the cached copy can no longer be trusted. */
static void lbs_block_invalidate(struct lbs_block *blk, bool report)
{
	struct lbs_c *lc = blk->lc;

	if (report && test_bit(LBS_B_DIRTY, &blk->flags)) {
		/* Acknowledged data is gone: the next flush must fail. */
		atomic_inc(&lc->wb_errors);
		lbs_stat_inc(lc, LBS_WB_ERRORS);
		DMERR_LIMIT("%s: block %lu lost on write-back",
			    dm_table_device_name(lc->ti->table), blk->index);
	}
	bitmap_zero(blk->valid, lc->block_sectors);
	lbs_block_set_clean(blk);
}

static struct bio *lbs_block_pop(struct lbs_block *blk)
{
	struct bio *bio;

	spin_lock(&blk->lock);
	bio = bio_list_pop(&blk->bios);
	spin_unlock(&blk->lock);
	return bio;
}

static void lbs_block_io_done(struct lbs_block *blk)
{
	struct lbs_c *lc = blk->lc;
	blk_status_t status = blk->io_status;
	struct bio_list done;
	struct bio *bio;
	int b, e;

	clear_bit(LBS_B_IO_DONE, &blk->flags);
	clear_bit(LBS_B_IO, &blk->flags);
	if (status) {
		lbs_stat_inc(lc, LBS_LOWER_ERRORS);
		DMERR_LIMIT("%s: %s error %d on block %lu",
			    dm_table_device_name(lc->ti->table),
			    blk->io_write ? "write" : "read",
			    blk_status_to_errno(status), blk->index);
	}

	if (!blk->io_write) {
		if (blk->fill) {
			if (!status)
				for_each_clear_bitrange(b, e, blk->valid,
							lc->block_sectors)
					lbs_buf_copy_buf(blk->buf, blk->fill,
							 b << SECTOR_SHIFT,
							 (e - b) << SECTOR_SHIFT);
			lbs_buf_put(lc, blk->fill, lc->bounce_pool);
			blk->fill = NULL;
		}
		if (!status) {
			bitmap_fill(blk->valid, lc->block_sectors);
		} else if (blk->fill_for_wb) {
			lbs_block_invalidate(blk, true);
		} else {
			/* Fail the bio that needed the block; later ones retry. */
			bio = lbs_block_pop(blk);
			if (bio) {
				bio->bi_status = status;
				bio_endio(bio);
			}
		}
		blk->fill_for_wb = false;
		return;
	}

	atomic_dec(&lc->nr_writing);
	done = blk->wait_write;
	bio_list_init(&blk->wait_write);
	if (status)
		lbs_block_invalidate(blk, true);
	else
		lbs_block_set_clean(blk);
	while ((bio = bio_list_pop(&done))) {
		bio->bi_status = status;
		bio_endio(bio);
	}
}

/* ------------------------------------------------------- state machine */

static bool lbs_range_valid(struct lbs_block *blk, unsigned int off,
			    unsigned int nr)
{
	return find_next_zero_bit(blk->valid, off + nr, off) >= off + nr;
}

/* Would writing [off, off + nr) leave the whole block valid? */
static bool lbs_rest_valid(struct lbs_block *blk, unsigned int off,
			   unsigned int nr)
{
	unsigned int bs = blk->lc->block_sectors;

	return find_first_zero_bit(blk->valid, off) >= off &&
	       find_next_zero_bit(blk->valid, bs, off + nr) >= bs;
}

static bool lbs_block_do_wb(struct lbs_block *blk)
{
	struct lbs_c *lc = blk->lc;

	if (!test_bit(LBS_B_DIRTY, &blk->flags)) {
		lbs_block_set_clean(blk);
		return true;
	}
	if (!bitmap_full(blk->valid, lc->block_sectors)) {
		if (test_bit(LBS_B_OPEN, &blk->flags))
			lbs_stat_inc(lc, LBS_TAIL_WRITES);
		lbs_block_fill(blk, true, true);
		return false;
	}
	lbs_block_write(blk, 0);
	return false;
}

static bool lbs_block_do_bio(struct lbs_block *blk, struct bio *bio)
{
	struct lbs_c *lc = blk->lc;
	sector_t rel = dm_target_offset(lc->ti, bio->bi_iter.bi_sector);
	unsigned int off = rel & (lc->block_sectors - 1);
	unsigned int nr = bio_sectors(bio);
	bool whole = nr == lc->block_sectors;
	bool was_full = bitmap_full(blk->valid, lc->block_sectors);
	bool fua, sync;

	switch (bio_op(bio)) {
	case REQ_OP_READ:
		if (!lbs_range_valid(blk, off, nr)) {
			lbs_stat_inc(lc, LBS_CACHE_MISSES);
			lbs_block_fill(blk, false, false);
			return false;
		}
		lbs_stat_inc(lc, LBS_CACHE_HITS);
		lbs_copy_bio(blk->buf, bio, off << SECTOR_SHIFT, true);
		lbs_block_pop(blk);
		bio_endio(bio);
		return true;
	case REQ_OP_DISCARD:
		/* Only whole blocks get here; their contents become undefined. */
		lbs_block_pop(blk);
		lbs_block_invalidate(blk, false);
		if (lc->no_discard_passdown) {
			bio_endio(bio);
		} else {
			struct lbs_bio *pb = dm_per_bio_data(bio, sizeof(*pb));

			/* lbs_end_io() counts its errors like any remapped bio. */
			pb->remapped = true;
			lbs_remap(lc, bio);
			dm_submit_bio_remap(bio, NULL);
		}
		return true;
	case REQ_OP_WRITE:
	case REQ_OP_WRITE_ZEROES:
		break;
	default:
		lbs_block_pop(blk);
		bio_io_error(bio);
		return true;
	}

	fua = bio->bi_opf & REQ_FUA;
	sync = lc->write_through || fua || whole;
	if (sync && !whole && !lbs_rest_valid(blk, off, nr)) {
		lbs_block_fill(blk, true, false);
		return false;
	}

	if (bio_op(bio) == REQ_OP_WRITE_ZEROES)
		lbs_buf_copy(blk->buf, off << SECTOR_SHIFT, NULL,
			     nr << SECTOR_SHIFT, false);
	else
		lbs_copy_bio(blk->buf, bio, off << SECTOR_SHIFT, false);
	bitmap_set(blk->valid, off, nr);
	if (!whole)
		lbs_stat_inc(lc, LBS_PARTIAL_WRITES);
	lbs_block_pop(blk);

	if (sync) {
		/* Completed by the block's write, after the device has it. */
		bio_list_add(&blk->wait_write, bio);
		lbs_block_write(blk, fua ? REQ_FUA : 0);
		return false;
	}

	lbs_block_set_dirty(blk, off + nr);
	bio_endio(bio);
	if (!was_full && bitmap_full(blk->valid, lc->block_sectors)) {
		/* Gathered into a whole block: write it now, with no read. */
		lbs_block_write(blk, 0);
		return false;
	}
	return true;
}

/* One step of the block's state machine; false when it must wait. */
static bool lbs_block_step(struct lbs_block *blk)
{
	struct bio *bio;

	if (test_bit(LBS_B_IO_DONE, &blk->flags)) {
		smp_mb__after_atomic();	/* see io_status set before IO_DONE */
		lbs_block_io_done(blk);
	} else if (test_bit(LBS_B_IO, &blk->flags)) {
		return false;
	}

	/* Write-back first, so a stream of bios cannot starve a flush. */
	if (test_bit(LBS_B_WB_WANTED, &blk->flags))
		return lbs_block_do_wb(blk);

	spin_lock(&blk->lock);
	bio = bio_list_peek(&blk->bios);
	spin_unlock(&blk->lock);
	if (!bio)
		return false;
	if (!blk->buf && !lbs_block_get_buf(blk))
		return false;
	return lbs_block_do_bio(blk, bio);
}

static void lbs_block_work(struct work_struct *work)
{
	struct lbs_block *blk = container_of(work, struct lbs_block, work);

	while (lbs_block_step(blk))
		cond_resched();
	lbs_block_put(blk);
}

static struct lbs_block *lbs_block_alloc(struct lbs_c *lc, unsigned long index,
					 gfp_t gfp)
{
	struct lbs_block *blk = mempool_alloc(lc->block_pool, gfp);

	if (!blk)
		return NULL;
	memset(blk, 0, struct_size(blk, valid,
				   BITS_TO_LONGS(lc->block_sectors)));
	blk->lc = lc;
	blk->index = index;
	spin_lock_init(&blk->lock);
	bio_list_init(&blk->bios);
	bio_list_init(&blk->wait_write);
	INIT_WORK(&blk->work, lbs_block_work);
	INIT_LIST_HEAD(&blk->park);
	return blk;
}

/*
 * Queue @bio, which lies within block @index, on that block.  With a @gfp
 * that cannot wait, false when memory for a new block or an xarray node is
 * short; with one that can, only once the memory is there.
 */
static bool lbs_cache_queue(struct lbs_c *lc, struct bio *bio,
			    unsigned long index, gfp_t gfp)
{
	struct lbs_block *blk, *new = NULL;
	int r;

retry:
	rcu_read_lock();
	blk = xa_load(&lc->blocks, index);
	if (blk) {
		spin_lock(&blk->lock);
		rcu_read_unlock();
		if (test_bit(LBS_B_DEAD, &blk->flags)) {
			/* Being evicted; it leaves the xarray before the unlock. */
			spin_unlock(&blk->lock);
			goto retry;
		}
		bio_list_add(&blk->bios, bio);
		set_bit(LBS_B_REFERENCED, &blk->flags);
		atomic_inc(&blk->ref);
		spin_unlock(&blk->lock);
		if (new)
			mempool_free(new, lc->block_pool);
		lbs_block_run(blk);
		return true;
	}
	rcu_read_unlock();

	if (!new) {
		new = lbs_block_alloc(lc, index, gfp);
		if (!new)
			return false;
	}
	/* The bio goes in first so that eviction never sees it empty. */
	bio_list_init(&new->bios);
	bio_list_add(&new->bios, bio);
	atomic_set(&new->ref, 2);	/* the cache's and the work's */
	r = xa_insert(&lc->blocks, index, new, gfp);
	if (r == -EBUSY)
		goto retry;
	if (r) {
		mempool_free(new, lc->block_pool);
		return false;
	}
	/*
	 * Another bio may have found it and made it dirty already; our
	 * reference keeps it from eviction until the work runs.
	 */
	spin_lock(&new->lock);
	if (!test_bit(LBS_B_DIRTY, &new->flags))
		xa_set_mark(&lc->blocks, index, LBS_MARK_CLEAN);
	spin_unlock(&new->lock);
	lbs_block_run(new);
	return true;
}

static void lbs_defer_work(struct work_struct *work)
{
	struct lbs_c *lc = container_of(work, struct lbs_c, defer_work);
	unsigned long index;
	sector_t rel;
	struct bio *bio;

	for (;;) {
		spin_lock_irq(&lc->defer_lock);
		bio = bio_list_pop(&lc->deferred);
		/* Until the list is empty, map() queues behind it. */
		if (!bio)
			WRITE_ONCE(lc->deferring, false);
		spin_unlock_irq(&lc->defer_lock);
		if (!bio)
			break;
		rel = dm_target_offset(lc->ti, bio->bi_iter.bi_sector);
		index = lbs_block_of(lc, rel);
		/* No xarray node even in reclaim: let it run, then retry. */
		while (!lbs_cache_queue(lc, bio, index, GFP_NOIO))
			schedule_timeout_uninterruptible(1);
	}
}

/* Called by map(): never sleeps. */
int lbs_cache_map(struct lbs_c *lc, struct bio *bio, unsigned long index)
{
	unsigned long flags;

	if (!READ_ONCE(lc->deferring) &&
	    lbs_cache_queue(lc, bio, index, GFP_NOWAIT | __GFP_NOWARN))
		return DM_MAPIO_SUBMITTED;

	lbs_stat_inc(lc, LBS_MAP_DEFERRED);
	spin_lock_irqsave(&lc->defer_lock, flags);
	bio_list_add(&lc->deferred, bio);
	WRITE_ONCE(lc->deferring, true);
	spin_unlock_irqrestore(&lc->defer_lock, flags);
	queue_work(lc->wq, &lc->defer_work);
	return DM_MAPIO_SUBMITTED;
}

/* -------------------------------------------------------------- shrinker */

static unsigned long lbs_shrink_count(struct shrinker *s,
				      struct shrink_control *sc)
{
	struct lbs_c *lc = lbs_shrinker_priv(s);
	int clean = atomic_read(&lc->nr_bufs) - atomic_read(&lc->nr_dirty);

	return max(clean, 0);
}

static unsigned long lbs_shrink_scan(struct shrinker *s,
				     struct shrink_control *sc)
{
	struct lbs_c *lc = lbs_shrinker_priv(s);

	return lbs_cache_evict(lc, sc->nr_to_scan);
}

int lbs_cache_init(struct lbs_c *lc)
{
	size_t bsize = sizeof(struct lbs_block) +
		       BITS_TO_LONGS(lc->block_sectors) * sizeof(long);

	xa_init(&lc->blocks);
	spin_lock_init(&lc->defer_lock);
	bio_list_init(&lc->deferred);
	INIT_WORK(&lc->defer_work, lbs_defer_work);
	spin_lock_init(&lc->park_lock);
	INIT_LIST_HEAD(&lc->parked);
	spin_lock_init(&lc->pt_lock);
	INIT_LIST_HEAD(&lc->pt_writes);
	init_waitqueue_head(&lc->pt_wait);

	lc->block_pool = mempool_create_kmalloc_pool(LBS_BLOCK_POOL_MIN, bsize);
	lc->buf_pool = mempool_create(LBS_BUF_POOL_MIN, lbs_buf_alloc,
				      lbs_buf_free, lc);
	lc->bounce_pool = mempool_create(LBS_BOUNCE_POOL_MIN, lbs_buf_alloc,
					 lbs_buf_free, lc);
	if (!lc->block_pool || !lc->buf_pool || !lc->bounce_pool)
		return -ENOMEM;

	lc->shrinker = lbs_shrinker_create(dm_table_device_name(lc->ti->table),
					   lc, lbs_shrink_count, lbs_shrink_scan);
	if (!lc->shrinker)
		return -ENOMEM;
	return 0;
}

/* Everything is idle: drop every block, then the memory behind them. */
void lbs_cache_exit(struct lbs_c *lc)
{
	struct lbs_block *blk;
	unsigned long index;

	if (lc->shrinker)
		lbs_shrinker_destroy(lc->shrinker);
	xa_for_each(&lc->blocks, index, blk) {
		xa_erase(&lc->blocks, index);
		WARN_ON_ONCE(atomic_read(&blk->ref) != 1);
		lbs_block_put(blk);
	}
	rcu_barrier();
	mempool_destroy(lc->bounce_pool);
	mempool_destroy(lc->buf_pool);
	mempool_destroy(lc->block_pool);
}
