package shards

import (
	"context"
	"fmt"
	"time"
)

// LoadPart reads the tensors of routed expert e of unit (with NoExpert: the unit's tensors of no expert) into buf
// with one sequential read of the page-aligned byte range holding them (UnitInfo.PartBytes), and returns them,
// aliasing buf, once each is verified as Load verifies a unit's (under VerifyOnce, a part or unit verified
// earlier in this process in the unchanged file is not checksummed again). The split lays each expert's tensors
// out together, so a mixture-of-experts layer is read without the experts no row was routed to. The shard's own
// table, at its end, is not read: the manifest says where the tensors lie, and a checksum failure names the
// expert. buf is grown as needed; LoadPart is safe for concurrent use with distinct Buffers.
func (s *Set) LoadPart(ctx context.Context, unit string, e int, buf *Buffer) (*Loaded, error) {
	u, path, err := s.request(ctx, "LoadPart", unit, buf)
	if err != nil {
		return nil, err
	}
	what := "the tensors of no expert"
	if e != NoExpert {
		what = fmt.Sprintf("expert %d", e)
	}
	tensors := u.Part(e)
	if len(tensors) == 0 {
		return nil, fmt.Errorf("shards %s: unit %s holds no tensors of %s", s.Dir, unit, what)
	}
	start := time.Now()
	r, st, err := s.openChecked(u, path)
	if err != nil {
		return nil, err
	}
	defer r.close()
	key := fmt.Sprintf("%s#%d", u.Name, e)
	verify := VerifyPolicy(s.policy.Load()) != VerifyOnce || !(s.verifiedAs(key, st) || s.verifiedAs(u.Name, st))
	lo, hi := partRange(tensors)
	shifted := make([]TensorInfo, len(tensors)) // offsets in the part as read into buf
	for i, t := range tensors {
		t.Offset -= lo
		shifted[i] = t
	}
	area := decodeSize(shifted)
	buf.release()
	buf.ensure(hi - lo + area)
	file := buf.b[:hi-lo]
	c, err := newCheck(fmt.Sprintf("%s (unit %s, %s)", path, u.Name, what), file, shifted, buf.b[hi-lo:hi-lo+area], verify, s.decoder)
	if err != nil {
		return nil, err
	}
	reads := tracedReads(ctx, r, func(b []byte, off int64) error { return r.readAt(b, off+lo) })
	readEnd, err := c.runWhileReading(ctx, file, reads, func() error { return nil })
	if err != nil {
		return nil, err
	}
	part := u
	part.Tensors, part.FileSize, part.DecodeSize = tensors, hi-lo, area
	l := &Loaded{Unit: part, ReadBytes: hi - lo, ReadTime: readEnd.Sub(start), Verified: verify}
	if l.Tensors, err = c.result(); err != nil {
		s.markVerified(key, nil)
		return nil, err
	}
	if verify {
		s.markVerified(key, st)
	}
	l.DecodeTime = time.Since(readEnd)
	return l, nil
}
