; A false claim, kept to show what BLOCKED looks like: |x| < 100 fails at x = 100.
(set-logic QF_LIA)
(declare-const x Int)
(define-fun absv ((v Int)) Int (ite (>= v 0) v (- v)))
(define-fun abs_below_100 () Bool (< (absv x) 100))
