package pcapfilter

import (
	"errors"

	"golang.org/x/net/bpf"
)

// maxInstructions is the kernel's limit on a classic BPF program
// (BPF_MAXINSNS).
const maxInstructions = 4096

var errTooLong = errors.New("filter too long")

// emitter lays a program out from its end: every jump goes forward, so a
// test's targets are placed before the test is, and a target too far for
// a conditional jump's 8-bit offset gets a "ja" trampoline next to it.
// rev holds the program reversed; a position is an index in rev.
type emitter struct {
	rev []bpf.Instruction
}

func (e *emitter) push(ins bpf.Instruction) int {
	e.rev = append(e.rev, ins)
	return len(e.rev) - 1
}

// skip is the offset of a jump placed at the next position to target.
func (e *emitter) skip(target int) int { return len(e.rev) - target - 1 }

// gen places the code of n, which goes to t when n holds and to f when it
// does not, and returns its entry.
func (e *emitter) gen(n node, t, f int) int {
	switch n := n.(type) {
	case nAnd:
		return e.gen(n.l, e.gen(n.r, t, f), f)
	case nOr:
		return e.gen(n.l, t, e.gen(n.r, t, f))
	case nNot:
		return e.gen(n.x, f, t)
	case nTrue:
		return t
	case nTest:
		for {
			if e.skip(t) > 255 {
				t = e.push(bpf.Jump{Skip: uint32(e.skip(t))})
				continue
			}
			if e.skip(f) > 255 {
				f = e.push(bpf.Jump{Skip: uint32(e.skip(f))})
				continue
			}
			break
		}
		st, sf := uint8(e.skip(t)), uint8(e.skip(f))
		if n.useX {
			e.push(bpf.JumpIfX{Cond: n.cond, SkipTrue: st, SkipFalse: sf})
		} else {
			e.push(bpf.JumpIf{Cond: n.cond, Val: n.val, SkipTrue: st, SkipFalse: sf})
		}
		for i := len(n.code) - 1; i >= 0; i-- {
			e.push(n.code[i])
		}
		return len(e.rev) - 1
	}
	panic("pcapfilter: unknown node")
}

// program is the classic BPF program for n: accept returns snapLength,
// reject 0.
func program(n node, snapLength uint32) ([]bpf.Instruction, error) {
	e := &emitter{}
	reject := e.push(bpf.RetConstant{Val: 0})
	accept := e.push(bpf.RetConstant{Val: snapLength})
	e.gen(n, accept, reject)
	if len(e.rev) > maxInstructions {
		return nil, errTooLong
	}
	prog := make([]bpf.Instruction, len(e.rev))
	for i, ins := range e.rev {
		prog[len(prog)-1-i] = ins
	}
	return prog, nil
}
