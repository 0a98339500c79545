// SPDX-License-Identifier: GPL-2.0
/*
 * dm-lbs write-back: when dirty blocks reach the device.
 *
 * Partial writes are acknowledged once they are in the cache.  A block goes
 * down whole when it fills up, when it has been dirty for writeback_delay,
 * when the cache needs room, and before any FLUSH completes: the FLUSH waits
 * for every block that was dirty when it arrived, and fails if write-back
 * lost acknowledged data since the last FLUSH.
 */

#include <linux/writeback.h>

#include "dm-lbs.h"

/* Flag every dirty block for write-back and wait for all of them. */
int lbs_wb_write_all(struct lbs_c *lc)
{
	int errors = atomic_read(&lc->wb_errors);
	struct lbs_block *blk;
	unsigned long index;

	if (!atomic_read(&lc->nr_dirty))
		return 0;

	for (index = 0; (blk = lbs_block_next(lc, &index, LBS_MARK_DIRTY));
	     index++) {
		if (lbs_block_flag_flush(blk))
			lbs_block_queue(blk);
		lbs_block_put(blk);
		cond_resched();
	}
	for (index = 0; (blk = lbs_block_next(lc, &index, LBS_MARK_FLUSH));
	     index++) {
		wait_event(lc->wb_wait,
			   !test_bit(LBS_B_FLUSH_PENDING, &blk->flags));
		lbs_block_put(blk);
	}
	return atomic_read(&lc->wb_errors) != errors ? -EIO : 0;
}

/*
 * Is the block worth writing now?  Not if it is open or was written within
 * @delay: its writer is likely still filling it, and cutting it costs a
 * read and a second write.
 */
static bool lbs_wb_idle(struct lbs_block *blk, unsigned long delay)
{
	return !test_bit(LBS_B_OPEN, &blk->flags) &&
	       time_after_eq(jiffies, READ_ONCE(blk->written) + delay);
}

/*
 * Cache pressure: start write-back of a few dirty blocks, do not wait.
 * Idle blocks first; blocks still being filled only when there are no
 * others.  A hand carries on where the last call stopped, so that the same
 * blocks at the start of the device are not asked again and again.
 */
void lbs_wb_kick(struct lbs_c *lc, unsigned int nr)
{
	unsigned long delay = msecs_to_jiffies(lc->wb_delay_ms);
	unsigned long index = READ_ONCE(lc->kick_hand), start = index;
	struct lbs_block *blk;
	bool wrapped = false, any = false;

	while (nr) {
		blk = lbs_block_next(lc, &index, LBS_MARK_DIRTY);
		if (blk && wrapped && index >= start) {
			lbs_block_put(blk);
			blk = NULL;
		}
		if (!blk) {
			if (!wrapped) {
				wrapped = true;
				index = 0;
				continue;
			}
			if (any)
				break;
			/* Nothing idle: take whatever is dirty. */
			any = true;
			wrapped = false;
			index = start;
			continue;
		}
		if (test_bit(LBS_B_DIRTY, &blk->flags) &&
		    (any || lbs_wb_idle(blk, delay)) &&
		    !test_and_set_bit(LBS_B_WB_WANTED, &blk->flags)) {
			lbs_block_queue(blk);
			nr--;
		}
		lbs_block_put(blk);
		index++;
		cond_resched();
	}
	WRITE_ONCE(lc->kick_hand, index);
}

bool lbs_wb_flush_needed(struct lbs_c *lc)
{
	if (atomic_read(&lc->nr_dirty))
		return true;
	/* A lost block counts its error before it stops being dirty. */
	smp_rmb();
	return atomic_read(&lc->wb_errors) != READ_ONCE(lc->wb_errors_seen);
}

void lbs_wb_queue_flush(struct lbs_c *lc, struct bio *bio)
{
	spin_lock_irq(&lc->flush_lock);
	bio_list_add(&lc->flush_bios, bio);
	spin_unlock_irq(&lc->flush_lock);
	queue_work(lc->flush_wq, &lc->flush_work);
}

static void lbs_wb_flush_work(struct work_struct *work)
{
	struct lbs_c *lc = container_of(work, struct lbs_c, flush_work);
	struct bio_list bios;
	struct bio *bio;
	int before;
	bool failed;

	spin_lock_irq(&lc->flush_lock);
	bios = lc->flush_bios;
	bio_list_init(&lc->flush_bios);
	spin_unlock_irq(&lc->flush_lock);

	/*
	 * Every flush in the batch arrived before this pass started.  An
	 * error that lands during the pass fails this batch and, as it may
	 * belong to data acknowledged after the batch, the next one too.
	 */
	before = atomic_read(&lc->wb_errors);
	lbs_wb_write_all(lc);
	failed = atomic_read(&lc->wb_errors) != lc->wb_errors_seen;
	WRITE_ONCE(lc->wb_errors_seen, before);

	while ((bio = bio_list_pop(&bios))) {
		struct lbs_bio *pb = dm_per_bio_data(bio, sizeof(*pb));

		if (failed) {
			bio->bi_status = BLK_STS_IOERR;
			bio_endio(bio);
			continue;
		}
		pb->remapped = true;
		lbs_remap(lc, bio);
		dm_submit_bio_remap(bio, NULL);
	}
}

/*
 * How long an open block (a sequential writer's, see LBS_B_OPEN) waits for
 * the rest of its data.  A buffered writer's pages reach us when the page
 * cache's flusher, waking every dirty_writeback_interval, finds them older
 * than dirty_expire_centisecs; it stops at the writer's position, mid-block,
 * and the rest of the block comes one expiry plus up to two flusher
 * periods later.  Cutting the block before would cost a read and a second
 * write of it.
 */
static unsigned long lbs_wb_tail_delay(struct lbs_c *lc)
{
	unsigned int ms = lc->tail_delay_ms;

	if (!lc->tail_delay_set)
		ms = LBS_PAGECACHE_EXPIRE_MS +
		     2 * 10 * READ_ONCE(dirty_writeback_interval);
	return msecs_to_jiffies(max(ms, lc->wb_delay_ms));
}

/*
 * A block is due once no write has come for writeback_delay (tail_delay
 * when open), and at the latest LBS_WB_MAX_DELAYS delays (two tail delays)
 * after it became dirty, however often it is written.
 */
static bool lbs_wb_due(struct lbs_block *blk, unsigned long delay,
		       unsigned long tail)
{
	unsigned long max_age = LBS_WB_MAX_DELAYS * delay;

	if (test_bit(LBS_B_OPEN, &blk->flags)) {
		delay = tail;
		max_age = 2 * tail;
	}
	return time_after_eq(jiffies, READ_ONCE(blk->written) + delay) ||
	       time_after_eq(jiffies, READ_ONCE(blk->dirtied) + max_age);
}

static void lbs_wb_timer(struct work_struct *work)
{
	struct lbs_c *lc = container_of(to_delayed_work(work), struct lbs_c,
					wb_work);
	unsigned long delay = msecs_to_jiffies(lc->wb_delay_ms);
	unsigned long tail = lbs_wb_tail_delay(lc);
	struct lbs_block *blk;
	unsigned long index;

	for (index = 0; (blk = lbs_block_next(lc, &index, LBS_MARK_DIRTY));
	     index++) {
		if (test_bit(LBS_B_DIRTY, &blk->flags) &&
		    lbs_wb_due(blk, delay, tail) &&
		    !test_and_set_bit(LBS_B_WB_WANTED, &blk->flags))
			lbs_block_queue(blk);
		lbs_block_put(blk);
		cond_resched();
	}
	queue_delayed_work(lc->flush_wq, &lc->wb_work, max(delay / 2, 1UL));
}

void lbs_wb_init(struct lbs_c *lc)
{
	spin_lock_init(&lc->flush_lock);
	bio_list_init(&lc->flush_bios);
	INIT_WORK(&lc->flush_work, lbs_wb_flush_work);
	INIT_DELAYED_WORK(&lc->wb_work, lbs_wb_timer);
	init_waitqueue_head(&lc->wb_wait);
}

void lbs_wb_start_timer(struct lbs_c *lc)
{
	if (!lc->write_through)
		queue_delayed_work(lc->flush_wq, &lc->wb_work,
				   msecs_to_jiffies(lc->wb_delay_ms));
}

void lbs_wb_stop_timer(struct lbs_c *lc)
{
	cancel_delayed_work_sync(&lc->wb_work);
}

/*
 * Postsuspend: bios are drained now; write what came after presuspend, then
 * make it all durable.  The table may be going away, and with it the only
 * record that the device's own cache holds our writes.
 */
void lbs_wb_suspend(struct lbs_c *lc)
{
	lbs_wb_stop_timer(lc);
	lbs_wb_write_all(lc);
	if (xchg(&lc->wrote, false))
		blkdev_issue_flush(lc->dev->bdev);
	flush_workqueue(lc->wq);
	/* The device may change under a suspended table: forget it. */
	while (lbs_cache_evict(lc, ULONG_MAX))
		;
}
