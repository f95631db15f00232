-- TPC-H Q15 (top supplier). Changed: the standard's CREATE VIEW revenue0 is the materialized view
-- q15_revenue; comma join as JOIN ... ON; the date + INTERVAL written out; no ORDER BY.
CREATE MATERIALIZED VIEW q15_revenue AS
SELECT l_suppkey AS supplier_no, sum(l_extendedprice * (1 - l_discount)) AS total_revenue
FROM lineitem
WHERE l_shipdate >= DATE '1996-01-01' AND l_shipdate < DATE '1996-04-01'
GROUP BY l_suppkey;

CREATE MATERIALIZED VIEW q15 AS
SELECT s_suppkey, s_name, s_address, s_phone, total_revenue
FROM supplier
  JOIN q15_revenue ON s_suppkey = supplier_no
WHERE total_revenue = (SELECT max(total_revenue) FROM q15_revenue);
