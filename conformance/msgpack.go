package conformance

// A generic msgpack reader and writer for the suite's data: declare
// options are written from JSON objects, and queue info maps are read into
// plain values so that cases can match keys (and the absence of keys) the
// typed decoder of package wire hides. Values read:
//
//	nil -> nil, bool -> bool, uint -> uint64, negative int -> int64,
//	float -> float64, str -> string, bin -> []byte, array -> []any,
//	map -> map[string]any (non-str keys are an error)

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
)

// encodeMsgpack writes a JSON value (as decoded with UseNumber) as msgpack.
// Object keys are written in sorted order, so the bytes are reproducible.
func encodeMsgpack(dst []byte, value any) ([]byte, error) {
	switch v := value.(type) {
	case nil:
		return append(dst, 0xc0), nil
	case bool:
		if v {
			return append(dst, 0xc3), nil
		}
		return append(dst, 0xc2), nil
	case json.Number:
		if u, err := strconv.ParseUint(v.String(), 10, 64); err == nil {
			return appendUint(dst, u), nil
		}
		if i, err := strconv.ParseInt(v.String(), 10, 64); err == nil {
			return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(i)), nil
		}
		f, err := v.Float64()
		if err != nil {
			return nil, err
		}
		return binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(f)), nil
	case string:
		n := len(v)
		switch {
		case n <= 31:
			dst = append(dst, 0xa0|byte(n))
		case n <= math.MaxUint8:
			dst = append(dst, 0xd9, byte(n))
		case n <= math.MaxUint16:
			dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
		default:
			dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
		}
		return append(dst, v...), nil
	case []any:
		dst = appendContainer(dst, 0x90, 0xdc, len(v))
		for _, item := range v {
			var err error
			if dst, err = encodeMsgpack(dst, item); err != nil {
				return nil, err
			}
		}
		return dst, nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for key := range v {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		dst = appendContainer(dst, 0x80, 0xde, len(v))
		for _, key := range keys {
			var err error
			if dst, err = encodeMsgpack(dst, key); err != nil {
				return nil, err
			}
			if dst, err = encodeMsgpack(dst, v[key]); err != nil {
				return nil, err
			}
		}
		return dst, nil
	}
	return nil, fmt.Errorf("cannot write %T as msgpack", value)
}

func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
}

func appendContainer(dst []byte, fix, sized16 byte, n int) []byte {
	if n <= 15 {
		return append(dst, fix|byte(n))
	}
	return binary.BigEndian.AppendUint16(append(dst, sized16), uint16(n))
}

// decodeMsgpack reads one value that fills b.
func decodeMsgpack(b []byte) (any, error) {
	r := &msgpackReader{b: b}
	value, err := r.value(0)
	if err != nil {
		return nil, err
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("%d bytes after the msgpack value", len(b)-r.off)
	}
	return value, nil
}

type msgpackReader struct {
	b   []byte
	off int
}

func (r *msgpackReader) take(n int) ([]byte, error) {
	if n < 0 || len(r.b)-r.off < n {
		return nil, fmt.Errorf("msgpack value cut short at offset %d", r.off)
	}
	out := r.b[r.off : r.off+n]
	r.off += n
	return out, nil
}

func (r *msgpackReader) length(width int) (int, error) {
	raw, err := r.take(width)
	if err != nil {
		return 0, err
	}
	switch width {
	case 1:
		return int(raw[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(raw)), nil
	}
	return int(binary.BigEndian.Uint32(raw)), nil
}

func (r *msgpackReader) value(depth int) (any, error) {
	if depth > 32 {
		return nil, fmt.Errorf("msgpack nested too deep")
	}
	head, err := r.take(1)
	if err != nil {
		return nil, err
	}
	code := head[0]
	switch {
	case code <= 0x7f:
		return uint64(code), nil
	case code >= 0xe0:
		return int64(int8(code)), nil
	case code <= 0x8f:
		return r.mapOf(int(code&0x0f), depth)
	case code <= 0x9f:
		return r.arrayOf(int(code&0x0f), depth)
	case code <= 0xbf:
		raw, err := r.take(int(code & 0x1f))
		return string(raw), err
	}
	widths := map[byte]int{0xc4: 1, 0xc5: 2, 0xc6: 4, 0xd9: 1, 0xda: 2, 0xdb: 4, 0xdc: 2, 0xdd: 4, 0xde: 2, 0xdf: 4,
		0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8, 0xca: 4, 0xcb: 8}
	switch code {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xc5, 0xc6, 0xd9, 0xda, 0xdb:
		n, err := r.length(widths[code])
		if err != nil {
			return nil, err
		}
		raw, err := r.take(n)
		if code >= 0xd9 {
			return string(raw), err
		}
		return append([]byte(nil), raw...), err
	case 0xdc, 0xdd:
		n, err := r.length(widths[code])
		if err != nil {
			return nil, err
		}
		return r.arrayOf(n, depth)
	case 0xde, 0xdf:
		n, err := r.length(widths[code])
		if err != nil {
			return nil, err
		}
		return r.mapOf(n, depth)
	case 0xcc, 0xcd, 0xce, 0xcf:
		raw, err := r.take(widths[code])
		if err != nil {
			return nil, err
		}
		var v uint64
		for _, b := range raw {
			v = v<<8 | uint64(b)
		}
		return v, nil
	case 0xd0, 0xd1, 0xd2, 0xd3:
		raw, err := r.take(widths[code])
		if err != nil {
			return nil, err
		}
		var v uint64
		for _, b := range raw {
			v = v<<8 | uint64(b)
		}
		shift := 64 - 8*len(raw)
		signed := int64(v<<shift) >> shift
		if signed >= 0 {
			return uint64(signed), nil
		}
		return signed, nil
	case 0xca:
		raw, err := r.take(4)
		if err != nil {
			return nil, err
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(raw))), nil
	case 0xcb:
		raw, err := r.take(8)
		if err != nil {
			return nil, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(raw)), nil
	}
	return nil, fmt.Errorf("msgpack type byte 0x%02x is not allowed", code)
}

func (r *msgpackReader) arrayOf(n int, depth int) (any, error) {
	if len(r.b)-r.off < n {
		return nil, fmt.Errorf("msgpack array of %d cut short", n)
	}
	out := make([]any, n)
	for i := range out {
		var err error
		if out[i], err = r.value(depth + 1); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *msgpackReader) mapOf(n int, depth int) (any, error) {
	if len(r.b)-r.off < 2*n {
		return nil, fmt.Errorf("msgpack map of %d cut short", n)
	}
	out := make(map[string]any, n)
	for range n {
		key, err := r.value(depth + 1)
		if err != nil {
			return nil, err
		}
		name, ok := key.(string)
		if !ok {
			return nil, fmt.Errorf("msgpack map key of type %T", key)
		}
		if out[name], err = r.value(depth + 1); err != nil {
			return nil, err
		}
	}
	return out, nil
}
