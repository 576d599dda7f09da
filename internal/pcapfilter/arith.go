package pcapfilter

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// scratchSlots is the number of BPF scratch memory words.
const scratchSlots = 16

var aluOps = map[string]bpf.ALUOp{
	"+": bpf.ALUOpAdd, "-": bpf.ALUOpSub, "*": bpf.ALUOpMul, "/": bpf.ALUOpDiv,
	"%": bpf.ALUOpMod, "&": bpf.ALUOpAnd, "|": bpf.ALUOpOr, "^": bpf.ALUOpXor,
	"<<": bpf.ALUOpShiftLeft, ">>": bpf.ALUOpShiftRight,
}

// transportProtos are the protocols whose [] index the IPv4 transport
// header (first fragment only), with their IP protocol numbers.
var transportProtos = map[qproto]uint32{
	pTCP: 6, pUDP: 17, pSCTP: 132, pICMP: 1, pIGMP: 2, pIGRP: 9, pPIM: 103, pVRRP: 112, pCARP: 112,
}

func arthErr(a *arth, format string, args ...any) error {
	return fmt.Errorf("%q (offset %d): %s", a.tok.text, a.tok.pos, fmt.Sprintf(format, args...))
}

// checks are the protocol tests under which a is evaluated, as libpcap
// collects them: a load adds its protocol's, and a binary operation keeps
// only its left operand's (gen_arth drops the right one's: in
// "ip[0] + tcp[0] = 0" nothing checks for TCP). It also refuses what
// libpcap refuses.
func (c compiler) checks(a *arth) (node, error) {
	switch a.kind {
	case arNum, arLen:
		return nil, nil
	case arBin:
		l, err := c.checks(a.l)
		if err != nil {
			return nil, err
		}
		if _, err := c.checks(a.r); err != nil {
			return nil, err
		}
		if a.r.lit {
			switch {
			case (a.op == "/" || a.op == "%") && a.r.num == 0:
				return nil, arthErr(a, "division by zero")
			case (a.op == "<<" || a.op == ">>") && a.r.num > 31:
				return nil, arthErr(a, "shift by more than 31 bits")
			}
		}
		return l, nil
	}
	idx, err := c.checks(a.idx)
	if err != nil {
		return nil, err
	}
	if a.size.kind == tNum && a.size.num != 1 && a.size.num != 2 && a.size.num != 4 {
		return nil, arthErr(a, "the size after ':' must be 1, 2 or 4")
	}
	switch a.p {
	case pLink:
		return idx, nil
	case pIP:
		return and(idx, mustLinktype(ethIP)), nil
	case pIP6:
		return and(idx, mustLinktype(ethIP6)), nil
	case pARP:
		return and(idx, mustLinktype(ethARP)), nil
	case pRARP:
		return and(idx, mustLinktype(ethRARP)), nil
	case pICMP6:
		return and(and(idx, mustLinktype(ethIP6)), cmpEq(offLinkPL+6, 1, 58)), nil
	}
	if proto, ok := transportProtos[a.p]; ok {
		inner := and(idx, nAnd{cmpEq(offLinkPL+9, 1, proto), ipFirstFrag()})
		return nAnd{mustLinktype(ethIP), inner}, nil
	}
	return nil, arthErr(a, "cannot be indexed (ether, ip, ip6, arp, rarp, tcp, udp, sctp, icmp, icmp6, igmp, igrp, pim, vrrp, carp can)")
}

// eval is code that leaves a's value in A, using scratch words from depth
// on. It may change X.
func (c compiler) eval(a *arth, depth int) ([]bpf.Instruction, error) {
	switch a.kind {
	case arNum:
		return []bpf.Instruction{bpf.LoadConstant{Dst: bpf.RegA, Val: a.num}}, nil
	case arLen:
		return []bpf.Instruction{bpf.LoadExtension{Num: bpf.ExtLen}}, nil
	case arBin:
		op := aluOps[a.op]
		if a.r.kind == arNum {
			code, err := c.eval(a.l, depth)
			return append(code, bpf.ALUOpConstant{Op: op, Val: a.r.num}), err
		}
		if depth >= scratchSlots {
			return nil, arthErr(a, "the expression is too deeply nested")
		}
		code, err := c.eval(a.r, depth)
		if err != nil {
			return nil, err
		}
		code = append(code, bpf.StoreScratch{Src: bpf.RegA, N: depth})
		l, err := c.eval(a.l, depth+1)
		if err != nil {
			return nil, err
		}
		code = append(code, l...)
		return append(code, bpf.LoadScratch{Dst: bpf.RegX, N: depth}, bpf.ALUOpX{Op: op}), nil
	}
	size := 1
	if a.size.kind == tNum {
		size = int(a.size.num)
	}
	_, transport := transportProtos[a.p]
	var base uint32
	switch a.p {
	case pLink:
		base = 0
	case pICMP6:
		base = offIP6Tr
	default:
		base = offLinkPL
	}
	if a.idx.kind == arNum && a.idx.num <= 0xffff {
		k := a.idx.num
		if transport {
			return []bpf.Instruction{
				bpf.LoadMemShift{Off: offLinkPL},
				bpf.LoadIndirect{Off: offLinkPL + k, Size: size},
			}, nil
		}
		return []bpf.Instruction{bpf.LoadAbsolute{Off: base + k, Size: size}}, nil
	}
	code, err := c.eval(a.idx, depth)
	if err != nil {
		return nil, err
	}
	if !transport {
		return append(code, bpf.TAX{}, bpf.LoadIndirect{Off: base, Size: size}), nil
	}
	if depth >= scratchSlots {
		return nil, arthErr(a, "the expression is too deeply nested")
	}
	return append(code,
		bpf.StoreScratch{Src: bpf.RegA, N: depth},
		bpf.LoadMemShift{Off: offLinkPL},
		bpf.LoadScratch{Dst: bpf.RegA, N: depth},
		bpf.ALUOpX{Op: bpf.ALUOpAdd},
		bpf.TAX{},
		bpf.LoadIndirect{Off: offLinkPL, Size: size},
	), nil
}

// relation is gen_relation: the protocol checks of both sides, then the
// comparison (negated for <=, < and !=; the checks are not).
func (c compiler) relation(e exRel) (node, error) {
	chk0, err := c.checks(e.a0)
	if err != nil {
		return nil, err
	}
	chk1, err := c.checks(e.a1)
	if err != nil {
		return nil, err
	}
	var cond bpf.JumpTest
	reversed := false
	switch e.op.kw {
	case ">":
		cond = bpf.JumpGreaterThan
	case ">=":
		cond = bpf.JumpGreaterOrEqual
	case "=":
		cond = bpf.JumpEqual
	case "<=":
		cond, reversed = bpf.JumpGreaterThan, true
	case "<":
		cond, reversed = bpf.JumpGreaterOrEqual, true
	case "!=":
		cond, reversed = bpf.JumpEqual, true
	}
	var test nTest
	if e.a1.kind == arNum {
		code, err := c.eval(e.a0, 0)
		if err != nil {
			return nil, err
		}
		test = nTest{code: code, cond: cond, val: e.a1.num}
	} else {
		code, err := c.eval(e.a1, 0)
		if err != nil {
			return nil, err
		}
		code = append(code, bpf.StoreScratch{Src: bpf.RegA, N: 0})
		l, err := c.eval(e.a0, 1)
		if err != nil {
			return nil, err
		}
		code = append(append(code, l...), bpf.LoadScratch{Dst: bpf.RegX, N: 0})
		test = nTest{code: code, cond: cond, useX: true}
	}
	var n node = test
	if reversed {
		n = not(test)
	}
	return and(and(chk0, chk1), n), nil
}
