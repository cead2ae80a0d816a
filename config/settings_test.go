package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/setting"
)

// TestParseErrorsNameTheVariable: a value that does not parse is reported
// naming its own variable, for every variable that can fail to parse,
// those of the stores' settings included (caarlos0/env names only the Go
// field, which two settings structs could share).
func TestParseErrorsNameTheVariable(t *testing.T) {
	checked := 0
	for _, f := range variableFields(reflect.TypeOf(Config{})) {
		if f.Type.Kind() == reflect.String || f.Type == reflect.TypeOf(setting.List{}) {
			continue // any text parses
		}
		name := f.Tag.Get("env")
		t.Run(name, func(t *testing.T) {
			env := base()
			env[name] = "@bad@"
			_, err := Load(env)
			if err == nil {
				t.Fatalf("Load accepted %s=@bad@", name)
			}
			// The value is quoted on its variable's line, and on no other.
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.Contains(line, "@bad@") != strings.HasPrefix(line, name+": ") {
					t.Errorf("Load's error for %s=@bad@ has the line %q", name, line)
				}
			}
			if !strings.Contains(err.Error(), "@bad@") {
				t.Errorf("Load's error for %s=@bad@ does not quote the value:\n%v", name, err)
			}
		})
		checked++
	}
	if checked < 40 {
		t.Errorf("only %d variables checked: are the stores' settings walked?", checked)
	}
}

// TestEveryStoreSettingIsAVariable: -h lists every field of every store's
// settings, with its help, once.
func TestEveryStoreSettingIsAVariable(t *testing.T) {
	listed := map[string]int{}
	for _, v := range Variables() {
		listed[v.Name]++
		if v.Description == "" {
			t.Errorf("%s has no help", v.Name)
		}
	}
	for _, st := range (&Config{}).stores() {
		typ := reflect.TypeOf(st.settings).Elem()
		for i := range typ.NumField() {
			name := typ.Field(i).Tag.Get("env")
			if name == "" {
				t.Errorf("%s.%s has no env tag", typ, typ.Field(i).Name)
			} else if listed[name] != 1 {
				t.Errorf("%s (%s.%s) listed %d times, want once", name, typ, typ.Field(i).Name, listed[name])
			}
		}
	}
}
