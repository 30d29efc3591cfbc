; Claims about integer absolute value. Each obligation is a Boolean constant
; named after it; an obligation holds when its negation is unsatisfiable.
(set-logic QF_LIA)
(declare-const x Int)
(declare-const y Int)
(define-fun absv ((v Int)) Int (ite (>= v 0) v (- v)))
(define-fun abs_nonnegative () Bool (>= (absv x) 0))
(define-fun abs_triangle () Bool (<= (absv (+ x y)) (+ (absv x) (absv y))))
