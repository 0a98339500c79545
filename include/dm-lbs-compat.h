/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Kernel API differences dm-lbs meets between Linux 6.1 and later kernels
 * (6.12, 7.x).  Force-included by Kbuild, so the sources are written
 * against one API and only this file knows about the others.
 */
#ifndef DM_LBS_COMPAT_H
#define DM_LBS_COMPAT_H

#include <linux/version.h>
#include <linux/blkdev.h>
#include <linux/fs.h>
#include <linux/slab.h>
#include <linux/shrinker.h>
#include <linux/workqueue.h>

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 5, 0)
#define LBS_MODE_WRITE		BLK_OPEN_WRITE
#else
#define LBS_MODE_WRITE		FMODE_WRITE
#endif

/* 6.11 renamed it, as it serves atomic write boundaries too. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
#define lbs_chunk_sectors_left	blk_boundary_sectors_left
#else
#define lbs_chunk_sectors_left	blk_chunk_sectors_left
#endif

typedef unsigned long (*lbs_shrink_fn)(struct shrinker *s,
				       struct shrink_control *sc);

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 7, 0)
/* Shrinkers became separately allocated objects in 6.7. */
static inline struct shrinker *lbs_shrinker_create(const char *name, void *priv,
						   lbs_shrink_fn count,
						   lbs_shrink_fn scan)
{
	struct shrinker *s = shrinker_alloc(0, "dm-lbs:%s", name);

	if (!s)
		return NULL;
	s->count_objects = count;
	s->scan_objects = scan;
	s->seeks = 1;
	s->private_data = priv;
	shrinker_register(s);
	return s;
}

static inline void lbs_shrinker_destroy(struct shrinker *s)
{
	shrinker_free(s);
}

static inline void *lbs_shrinker_priv(struct shrinker *s)
{
	return s->private_data;
}
#else
struct lbs_shrinker {
	struct shrinker shrinker;
	void *priv;
};

static inline struct shrinker *lbs_shrinker_create(const char *name, void *priv,
						   lbs_shrink_fn count,
						   lbs_shrink_fn scan)
{
	struct lbs_shrinker *ls = kzalloc(sizeof(*ls), GFP_KERNEL);

	if (!ls)
		return NULL;
	ls->priv = priv;
	ls->shrinker.count_objects = count;
	ls->shrinker.scan_objects = scan;
	ls->shrinker.seeks = 1;
	if (register_shrinker(&ls->shrinker, "dm-lbs:%s", name)) {
		kfree(ls);
		return NULL;
	}
	return &ls->shrinker;
}

static inline void lbs_shrinker_destroy(struct shrinker *s)
{
	unregister_shrinker(s);
	kfree(container_of(s, struct lbs_shrinker, shrinker));
}

static inline void *lbs_shrinker_priv(struct shrinker *s)
{
	return container_of(s, struct lbs_shrinker, shrinker)->priv;
}
#endif

#endif /* DM_LBS_COMPAT_H */
