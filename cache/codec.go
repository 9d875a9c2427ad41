package cache

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// codecVersion starts every value and is part of every key, so that a
// replica never decodes what another version wrote.
const codecVersion = 2 // 2: a chat answer's parts moved under Result.Chat

// encode writes r, and when it expires, as a Redis value: the version, the
// expiry in Unix milliseconds, and r in gob. Gob carries every exported
// field of batcher.Result, those added later too, and a replica that knows
// fewer fields skips the ones it does not know.
func encode(r *batcher.Result, expires time.Time) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(codecVersion)
	buf.Write(binary.BigEndian.AppendUint64(nil, uint64(expires.UnixMilli())))
	v := *r
	v.Err = nil // never stored: only successes are (batcher.Call.cacheStore)
	if err := gob.NewEncoder(&buf).Encode(&v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var errCodec = errors.New("cache: not a value this version wrote")

// decode reads what encode wrote.
func decode(b []byte) (*batcher.Result, time.Time, error) {
	if len(b) < 9 || b[0] != codecVersion {
		return nil, time.Time{}, errCodec
	}
	expires := time.UnixMilli(int64(binary.BigEndian.Uint64(b[1:9])))
	r := new(batcher.Result)
	if err := gob.NewDecoder(bytes.NewReader(b[9:])).Decode(r); err != nil {
		return nil, time.Time{}, err
	}
	return r, expires, nil
}
