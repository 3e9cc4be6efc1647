package stage

import "reflect"

// Handle ties a user-facing stage value to its engine view and to the
// user's implementation it was built from. Every stage type embeds it under
// an unexported alias (type handle = stage.Handle): the type then has
// Handle's unexported method, which only this package can name, so the
// engine finds the view while the stage package exports nothing of it.
type Handle struct {
	view any // a Transformer, an Extractor, a Sink or a bridge.Stage
	impl any // the user's value (Transformer, Poller, Sink implementation)
}

// NewHandle returns the handle of a stage whose engine view is view, built
// from the user's value impl (nil when the stage is built from functions
// only).
func NewHandle(view, impl any) Handle { return Handle{view: view, impl: impl} }

func (h Handle) stageHandle() Handle { return h }

// handled is implemented by the types that embed a Handle.
type handled interface{ stageHandle() Handle }

// handleOf returns the handle of v; false when v is no stage, or a nil
// pointer to one.
func handleOf(v any) (h Handle, ok bool) {
	s, ok := v.(handled)
	if !ok {
		return Handle{}, false
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return Handle{}, false
	}
	// A user type embedding a nil stage pointer panics in the promoted
	// method: it is no stage either.
	defer func() {
		if recover() != nil {
			h, ok = Handle{}, false
		}
	}()
	h = s.stageHandle()
	return h, h.view != nil
}

// Unbuilt reports whether v has a stage type but was not built by its
// package's constructor (a nil pointer, a zero value, or a nil stage
// embedded in another type).
func Unbuilt(v any) bool {
	if _, isStage := v.(handled); !isStage {
		return false
	}
	_, ok := handleOf(v)
	return !ok
}

// ViewOf returns the engine view of v when v is a stage built by a
// user-facing package; callers assert the kind they run.
func ViewOf(v any) (any, bool) {
	h, ok := handleOf(v)
	return h.view, ok
}

// TransformerOf returns the engine view of v when v is a transformer.
func TransformerOf(v any) (Transformer, bool) {
	view, _ := ViewOf(v)
	t, ok := view.(Transformer)
	return t, ok
}

// ExtractorOf returns the engine view of v when v is an extractor.
func ExtractorOf(v any) (Extractor, bool) {
	view, _ := ViewOf(v)
	x, ok := view.(Extractor)
	return x, ok
}

// SinkOf returns the engine view of v when v is a sink.
func SinkOf(v any) (Sink, bool) {
	view, _ := ViewOf(v)
	s, ok := view.(Sink)
	return s, ok
}

// ImplOf returns the user's value a stage was built from (the
// implementation of transformer.Transformer, extractor.Poller or
// sink.Sink), nil when v is no stage or was built from functions only.
func ImplOf(v any) any {
	h, _ := handleOf(v)
	return h.impl
}
