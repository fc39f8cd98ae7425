package engine

import "slices"

// recomputeFeed applies Plan.Recompute to one step of the batch loop: ids[i] are the new ids of the sequence in
// cache row rows[i], whose ids so far (history) begin with those the row holds. A sequence that this step would
// take past Plan.Recompute positions while its row holds no more than that many has its row emptied and is fed
// its whole history up to and including ids[i] instead, as transformers' generate recomputes a Phi-3 longrope
// sequence whose cache was written with the short factors. It returns what to feed (ids itself when nothing
// changes).
func (b *batcher) recomputeFeed(rows []int, ids [][]int, history func(i int) []int) ([][]int, error) {
	limit := b.run.plan.Recompute
	if limit <= 0 {
		return ids, nil
	}
	feed, copied := ids, false
	for i, r := range rows {
		held := b.kv.Len(r)
		if held == 0 || held > limit || held+len(ids[i]) <= limit {
			continue
		}
		if err := b.kv.Truncate(r, 0); err != nil {
			return nil, err
		}
		if !copied {
			feed, copied = slices.Clone(ids), true
		}
		feed[i] = history(i)[:held+len(ids[i])]
	}
	return feed, nil
}
