package main

import (
	"strings"
	"testing"
)

func TestCount(t *testing.T) {
	const events = `{"Action":"run","Package":"a","Test":"TestOne"}
{"Action":"pass","Package":"a","Test":"TestOne"}
{"Action":"fail","Package":"a","Test":"TestTwo"}
{"Action":"skip","Package":"a","Test":"TestThree"}
{"Action":"fail","Package":"a"}
{"Action":"fail","Package":"b"}
# b [build failed]
{"Action":"pass","Package":"c"}
`
	got, err := count(strings.NewReader(events))
	if err != nil {
		t.Fatal(err)
	}
	if got.passed != 1 || got.failed != 1 || got.skipped != 1 {
		t.Errorf("count = %+v, want 1 passed, 1 failed, 1 skipped", got)
	}
	if len(got.brokenPackages) != 1 || got.brokenPackages[0] != "b" {
		t.Errorf("broken packages = %v, want [b]", got.brokenPackages)
	}
}
