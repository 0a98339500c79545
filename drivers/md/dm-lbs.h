/* SPDX-License-Identifier: GPL-2.0 */
/*
 * dm-lbs: a small-sector device on top of a device whose atomic unit (the
 * "block") is 8 KiB to 1 MiB.  Private header shared by the dm-lbs-*.c files.
 */
#ifndef DM_LBS_H
#define DM_LBS_H

#include <linux/device-mapper.h>
#include <linux/bio.h>
#include <linux/blkdev.h>
#include <linux/mempool.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#define DM_MSG_PREFIX "lbs"

#define LBS_MIN_BLOCK_SIZE	(8 * 1024)
#define LBS_MAX_BLOCK_SIZE	(1024 * 1024)
#define LBS_DEFAULT_CACHE_MB	32
#define LBS_MAX_CACHE_MB	(1024 * 1024)
#define LBS_CACHE_RAM_DIV	8	/* the cache takes at most 1/8 of RAM */
#define LBS_MIN_CACHE_BLOCKS	4
#define LBS_DEFAULT_WB_DELAY_MS	1000
#define LBS_MAX_WB_DELAY_MS	(3600 * 1000)
#define LBS_WB_MAX_DELAYS	8	/* dirty at most this many delays */
/*
 * The page cache's dirty_expire_centisecs default.  The kernel exports the
 * flusher's interval (dirty_writeback_interval) but not the expiry, so
 * lbs-setup passes the live value as tail_delay; this is the fallback.
 */
#define LBS_PAGECACHE_EXPIRE_MS	30000
#define LBS_MAX_TAIL_DELAY_MS	(3600 * 1000)

/* xarray marks of lc->blocks: walks cost what they find, not the cache. */
#define LBS_MARK_DIRTY		XA_MARK_0	/* LBS_B_DIRTY */
#define LBS_MARK_FLUSH		XA_MARK_1	/* LBS_B_FLUSH_PENDING */
#define LBS_MARK_CLEAN		XA_MARK_2	/* not LBS_B_DIRTY: eviction candidates */

/* Counters reported by "dmsetup status", in this order; append only. */
enum lbs_stat {
	LBS_PT_READS,		/* read bios remapped straight to the device */
	LBS_PT_WRITES,		/* write bios remapped straight to the device */
	LBS_CACHE_HITS,		/* read bios served from the cache */
	LBS_CACHE_MISSES,	/* read bios that needed the block read */
	LBS_PARTIAL_WRITES,	/* write bios covering part of a block */
	LBS_GATHERED,		/* block writes that needed no read */
	LBS_RMW_READS,		/* block reads done so a block could be written */
	LBS_LOWER_READ_BYTES,
	LBS_LOWER_WRITE_BYTES,
	LBS_ALLOC_FALLBACKS,	/* buffers built from order-0 pages */
	LBS_LOWER_ERRORS,	/* failed requests to the device */
	LBS_CACHE_WRITES,	/* whole blocks written from the cache */
	LBS_WB_ERRORS,		/* acknowledged blocks lost to a write error */
	LBS_PT_BOUNCED,		/* whole blocks copied: the device would split them */
	LBS_MAP_DEFERRED,	/* bios map handed to a worker to wait for memory */
	LBS_TAIL_WRITES,	/* open blocks written back incomplete, after tail_delay */
	LBS_NR_STATS
};

/* One block-sized buffer: one compound page, or order-0 pages after a fallback. */
struct lbs_buf {
	struct folio *folio;
	struct page *pages[];
};

/* struct lbs_block flags */
enum {
	LBS_B_IO,		/* a request to the device is in flight */
	LBS_B_IO_DONE,		/* ... and has completed: worker picks it up */
	LBS_B_DIRTY,		/* holds acknowledged data not yet on the device */
	LBS_B_WB_WANTED,	/* write the block back when idle */
	LBS_B_FLUSH_PENDING,	/* a flush waits for this block's write-back */
	LBS_B_FILLED,		/* read from the device since last written */
	LBS_B_PARKED,		/* waits for a cache slot or memory */
	LBS_B_REFERENCED,	/* used since the eviction clock last passed */
	LBS_B_DEAD,		/* evicted: lookups must retry */
	LBS_B_OPEN,		/* a sequential writer's block: the rest may follow */
};

struct lbs_block {
	struct lbs_c *lc;
	unsigned long index;		/* block number on the target */
	atomic_t ref;			/* the cache's, plus queued work and I/O */
	unsigned long flags;
	spinlock_t lock;		/* bios, DEAD, DIRTY transitions */
	struct bio_list bios;		/* waiting, in arrival order */
	struct bio_list wait_write;	/* completed by the write in flight */
	struct work_struct work;
	struct list_head park;		/* on lc->parked */
	unsigned long dirtied;		/* jiffies when it became dirty */
	unsigned long written;		/* jiffies of its latest write */
	struct lbs_buf *buf;		/* the block's data */
	struct lbs_buf *fill;		/* bounce for a read under dirty sectors */
	blk_status_t io_status;
	bool io_write;			/* the request in flight is a write */
	bool fill_for_wb;		/* the fill in flight serves a write-back */
	struct rcu_head rcu;
	unsigned long valid[];		/* one bit per 512-byte sector */
};

struct lbs_c {
	struct dm_target *ti;
	struct dm_dev *dev;
	sector_t start;			/* on dev, in sectors */
	unsigned int block_size;	/* bytes */
	unsigned int block_sectors;
	unsigned int block_shift;	/* log2(block_sectors) */
	unsigned int pages_per_block;
	unsigned int lbs;		/* exposed logical block size */
	unsigned int cache_mb;
	unsigned int wb_delay_ms;
	unsigned int tail_delay_ms;
	bool lbs_set, cache_set, wb_delay_set, tail_delay_set;
	bool write_through;
	bool no_discard_passdown;
	unsigned int max_blocks;	/* cache bound, in blocks */

	struct xarray blocks;		/* block number -> struct lbs_block */
	atomic_t nr_bufs;		/* blocks holding a buffer */
	atomic_t nr_dirty;
	atomic_t nr_writing;		/* block writes in flight */
	atomic_t free_gen;		/* a buffer was freed, a block went idle */
	unsigned long clock_hand;	/* where eviction looks next */
	unsigned long kick_hand;	/* where pressure write-back looks next */
	spinlock_t park_lock;
	struct list_head parked;	/* blocks waiting for a slot or memory */

	spinlock_t defer_lock;		/* protects deferred */
	struct bio_list deferred;	/* bios map could not queue unblocking */
	bool deferring;			/* deferred is being drained */
	struct work_struct defer_work;

	struct workqueue_struct *wq;	/* per-block state machines */
	struct workqueue_struct *flush_wq; /* flushes, timer: wait on wq */
	struct bio_set bs;
	mempool_t *block_pool;
	mempool_t *buf_pool;		/* reserve of whole cache buffers */
	mempool_t *bounce_pool;		/* reserve of fill bounce buffers */

	spinlock_t pt_lock;		/* protects pt_writes */
	struct list_head pt_writes;	/* pass-through writes in flight */
	wait_queue_head_t pt_wait;	/* one of them completed */

	spinlock_t flush_lock;		/* protects flush_bios */
	struct bio_list flush_bios;
	struct work_struct flush_work;
	struct delayed_work wb_work;
	wait_queue_head_t wb_wait;	/* FLUSH_PENDING cleared */
	atomic_t wb_errors;
	int wb_errors_seen;		/* by the flush worker */
	bool wrote;			/* a write went down since suspend */

	struct shrinker *shrinker;
	atomic64_t stats[LBS_NR_STATS];
};

/* Per-bio data: what end_io must undo and count for a remapped bio. */
struct lbs_bio {
	struct list_head pt_entry;	/* on pt_writes while pt_count */
	unsigned long pt_first;
	unsigned int pt_count;		/* blocks this write covers */
	bool remapped;			/* sent to the device as it is */
};

static inline void lbs_stat_add(struct lbs_c *lc, enum lbs_stat s, u64 v)
{
	atomic64_add(v, &lc->stats[s]);
}

static inline void lbs_stat_inc(struct lbs_c *lc, enum lbs_stat s)
{
	atomic64_inc(&lc->stats[s]);
}

static inline unsigned long lbs_block_of(struct lbs_c *lc, sector_t sector)
{
	return sector >> lc->block_shift;
}

/* dm-lbs-cache.c */
int lbs_cache_init(struct lbs_c *lc);
void lbs_cache_exit(struct lbs_c *lc);
int lbs_cache_map(struct lbs_c *lc, struct bio *bio, unsigned long index);
bool lbs_cache_busy(struct lbs_c *lc, unsigned long first, unsigned long last,
		    unsigned long *found);
struct lbs_block *lbs_block_next(struct lbs_c *lc, unsigned long *index,
				 xa_mark_t mark);
void lbs_block_put(struct lbs_block *blk);
void lbs_block_queue(struct lbs_block *blk);
bool lbs_block_flag_flush(struct lbs_block *blk);
unsigned long lbs_cache_evict(struct lbs_c *lc, unsigned long nr);

/* dm-lbs-map.c */
int lbs_map_bio(struct lbs_c *lc, struct bio *bio);
void lbs_end_bio(struct lbs_c *lc, struct bio *bio, blk_status_t error);
void lbs_remap(struct lbs_c *lc, struct bio *bio);
void lbs_set_limits(struct lbs_c *lc, struct queue_limits *limits);

/* dm-lbs-writeback.c */
void lbs_wb_init(struct lbs_c *lc);
void lbs_wb_start_timer(struct lbs_c *lc);
void lbs_wb_stop_timer(struct lbs_c *lc);
void lbs_wb_queue_flush(struct lbs_c *lc, struct bio *bio);
bool lbs_wb_flush_needed(struct lbs_c *lc);
int lbs_wb_write_all(struct lbs_c *lc);
void lbs_wb_kick(struct lbs_c *lc, unsigned int nr);
void lbs_wb_suspend(struct lbs_c *lc);

/* dm-lbs-stats.c */
unsigned int lbs_emit_status(struct lbs_c *lc, status_type_t type,
			     char *result, unsigned int maxlen);
int lbs_process_message(struct lbs_c *lc, unsigned int argc, char **argv);

#endif /* DM_LBS_H */
