-- TPC-H Q14 (promotion effect). Changed: comma join as JOIN ... ON; the date + INTERVAL written out.
CREATE MATERIALIZED VIEW q14 AS
SELECT 100.00 * sum(CASE WHEN p_type LIKE 'PROMO%' THEN l_extendedprice * (1 - l_discount) ELSE 0 END)
       / sum(l_extendedprice * (1 - l_discount)) AS promo_revenue
FROM lineitem
  JOIN part ON l_partkey = p_partkey
WHERE l_shipdate >= DATE '1995-09-01' AND l_shipdate < DATE '1995-10-01';
