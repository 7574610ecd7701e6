package store

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// filledProcess is a process whose every column holds a value no other column
// holds, different for each seed, with what tends to break an encoding:
// quotes, a backslash, a question mark (bun's placeholder), non-ASCII, and
// a NUL inside the JSON columns.
func filledProcess(t *testing.T, seed int) Process {
	t.Helper()
	var p Process
	v := reflect.ValueOf(&p).Elem()
	at := time.Date(2026, 11, 22, 8, 48, 9, 984089000, time.FixedZone("x", 3600)).Add(time.Duration(seed) * time.Hour)
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		n := int64(seed*100 + i)
		switch f.Addr().Interface().(type) {
		case *string:
			f.SetString(fmt.Sprintf("%s %d 'q' \"d\" \\ ? é", name, seed))
		case **string:
			s := fmt.Sprintf("%s %d ?", name, seed)
			f.Set(reflect.ValueOf(&s))
		case *int64:
			f.SetInt(n)
		case **int64:
			f.Set(reflect.ValueOf(&n))
		case *bool:
			f.SetBool(seed%2 == 1)
		case *time.Time:
			f.Set(reflect.ValueOf(at))
		case **time.Time:
			t := at.Add(time.Duration(i) * time.Second)
			f.Set(reflect.ValueOf(&t))
		case *Object:
			f.Set(reflect.ValueOf(map[string]any{"field": name, "seed": float64(seed), "nul": "a\x00b ? 'q'", "list": []any{"x", nil, true}}))
		case *Displays:
			f.Set(reflect.ValueOf(Displays{{Kind: "image", Data: map[string]string{"image/png": fmt.Sprintf("%s%d", name, seed), "text/plain": "a\x00b"}}}))
		default:
			if name != "BaseModel" {
				t.Fatalf("field %s of type %s: the test does not know how to fill it", name, f.Type())
			}
		}
	}
	p.PID = 0
	return p
}

// TestEveryColumnRoundTrips: a process with every field set is read back as
// written; the write that ends an execution changes exactly its columns
// (finishColumns) and leaves the others as they were; and the prepared
// writes store what bun's own insert and update store, byte for byte.
// Fields are found by reflection, so a column added to Process is covered
// without a change here.
func TestEveryColumnRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			first, second := filledProcess(t, 1), filledProcess(t, 2)
			write(t, st, func(tx *Tx) error { return tx.InsertProcess(ctx, &first) })
			if first.PID < 1 {
				t.Fatalf("pid %d", first.PID)
			}
			got, err := st.GetProcess(ctx, first.PID)
			if err != nil {
				t.Fatal(err)
			}
			sameColumns(t, st, "insert", &first, got, nil)
			viaBun := filledProcess(t, 1)
			if _, err := st.DB.NewInsert().Model(&viaBun).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			sameStored(t, st, "insert", viaBun.PID, first.PID)

			second.PID, second.Runs = first.PID, first.Runs
			if ok, err := inTx(st, func(tx *Tx) (bool, error) { return tx.FinishProcess(ctx, &second) }); !ok || err != nil {
				t.Fatalf("finish: %v %v", ok, err)
			}
			if got, err = st.GetProcess(ctx, first.PID); err != nil {
				t.Fatal(err)
			}
			sameColumns(t, st, "finish", &first, got, finishColumns)
			bunFinish := second
			bunFinish.PID = viaBun.PID
			if _, err := st.DB.NewUpdate().Model(&bunFinish).Column(finishColumns...).WherePK().Exec(ctx); err != nil {
				t.Fatal(err)
			}
			sameStored(t, st, "finish", viaBun.PID, first.PID)
			if ok, err := inTx(st, func(tx *Tx) (bool, error) { return tx.FinishProcess(ctx, &second) }); ok || err != nil {
				t.Fatalf("a second finish of the same run: %v %v", ok, err)
			}
			stale := second
			stale.Runs++
			if ok, err := inTx(st, func(tx *Tx) (bool, error) { return tx.FinishProcess(ctx, &stale) }); ok || err != nil {
				t.Fatalf("finish of another run: %v %v", ok, err)
			}
		})
	}
}

// sameColumns fails unless got holds want's value in every column, except
// the columns in changed, which must hold filledProcess(t, 2)'s.
func sameColumns(t *testing.T, st *Store, what string, want, got *Process, changed []string) {
	t.Helper()
	other := filledProcess(t, 2)
	wv, gv, ov := reflect.ValueOf(want).Elem(), reflect.ValueOf(got).Elem(), reflect.ValueOf(&other).Elem()
	for _, f := range st.DB.Table(reflect.TypeFor[Process]()).Fields {
		if f.Name == "pid" {
			continue
		}
		w := wv.FieldByIndex(f.Index).Interface()
		if slices.Contains(changed, f.Name) {
			w = ov.FieldByIndex(f.Index).Interface()
		}
		if g := gv.FieldByIndex(f.Index).Interface(); !equalValues(w, g) {
			t.Errorf("%s: column %s holds %#v, want %#v", what, f.Name, deref(g), deref(w))
		}
	}
}

// equalValues compares two field values, times by the instant they name.
func equalValues(a, b any) bool {
	switch x := a.(type) {
	case time.Time:
		return x.Equal(b.(time.Time))
	case *time.Time:
		y := b.(*time.Time)
		return (x == nil) == (y == nil) && (x == nil || x.Equal(*y))
	}
	return reflect.DeepEqual(a, b)
}

func deref(v any) any {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		return rv.Elem().Interface()
	}
	return v
}

// sameStored fails unless two process rows store the same values, pid
// aside, as the database holds them (SQLite keeps times and JSON as text:
// an encoding bun did not write would sort and compare differently).
func sameStored(t *testing.T, st *Store, what string, a, b int64) {
	t.Helper()
	q := "SELECT row_to_json(p)::jsonb - 'pid' FROM processes p WHERE pid = ?"
	if st.local {
		var cols []string
		for _, f := range st.DB.Table(reflect.TypeFor[Process]()).Fields {
			if !f.IsPK {
				cols = append(cols, "quote("+f.Name+")")
			}
		}
		q = "SELECT " + strings.Join(cols, " || '|' || ") + " FROM processes WHERE pid = ?"
	}
	var ra, rb string
	if err := st.DB.QueryRowContext(context.Background(), q, a).Scan(&ra); err != nil {
		t.Fatal(err)
	}
	if err := st.DB.QueryRowContext(context.Background(), q, b).Scan(&rb); err != nil {
		t.Fatal(err)
	}
	if ra != rb {
		t.Errorf("%s: bun stored\n%s\nbut the prepared statement\n%s", what, ra, rb)
	}
}
