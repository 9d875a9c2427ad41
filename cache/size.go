package cache

import "reflect"

// entryOverhead is what an entry costs beyond its key's and value's own
// bytes: otter's node and hash table slot, the entry, the Result and the
// CacheKey strings' headers. TestMemoryWithinBound measures it.
const entryOverhead = 320

// deepSize returns the bytes that v's strings, slices, maps and pointers
// hold beyond v itself. It walks by reflection, so that a field added to
// batcher.Result is weighed without anyone remembering to.
func deepSize(v reflect.Value) int {
	switch v.Kind() {
	case reflect.String:
		return v.Len()
	case reflect.Slice:
		if v.IsNil() {
			return 0
		}
		n := v.Cap() * int(v.Type().Elem().Size())
		if hasPointers(v.Type().Elem()) {
			for i := range v.Len() {
				n += deepSize(v.Index(i))
			}
		}
		return n
	case reflect.Pointer:
		if v.IsNil() {
			return 0
		}
		return int(v.Type().Elem().Size()) + deepSize(v.Elem())
	case reflect.Interface:
		if v.IsNil() {
			return 0
		}
		e := v.Elem()
		return int(e.Type().Size()) + deepSize(e)
	case reflect.Map:
		if v.IsNil() {
			return 0
		}
		kt, et := v.Type().Key(), v.Type().Elem()
		n := v.Len() * int(kt.Size()+et.Size()+8) // plus a control byte and slack
		for it := v.MapRange(); it.Next(); {
			n += deepSize(it.Key()) + deepSize(it.Value())
		}
		return n
	case reflect.Struct:
		n := 0
		for i := range v.NumField() {
			n += deepSize(v.Field(i))
		}
		return n
	case reflect.Array:
		n := 0
		if hasPointers(v.Type().Elem()) {
			for i := range v.Len() {
				n += deepSize(v.Index(i))
			}
		}
		return n
	}
	return 0
}

// hasPointers reports whether a value of t may hold memory beyond itself.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Slice, reflect.Pointer, reflect.Interface, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
	case reflect.Array:
		return hasPointers(t.Elem())
	}
	return false
}
